// A small OAuth 2.0 authorization server for the minted-credential tests, on zitadel/oidc's
// op package: client credentials (RFC 6749 4.4), token exchange (RFC 8693) and revocation
// (RFC 7009), JWT access tokens, everything in memory. Its own storage, because the tests
// need static clients with allowed scopes and audiences, an audience parameter on client
// credentials, subject tokens that are Kubernetes ServiceAccount tokens (verified against
// the API server's JWKS), and a view of every token it issued and whether it was revoked.
//
//	oauth-server --addr 127.0.0.1:0 --issuer https://oauth.test:PORT --tls-cert C --tls-key K \
//	  --clients clients.json [--subject-jwks jwks.json --subject-issuer ISS --subject-audience AUD] \
//	  [--port-file F]
//
// clients.json: [{"id": "...", "secret": "...", "scopes": [...], "audiences": [...]}]
// GET /test/tokens lists the issued tokens (id, client, subject, audience, scopes, revoked).
package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/google/uuid"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

type clientConfig struct {
	ID        string   `json:"id"`
	Secret    string   `json:"secret"`
	Scopes    []string `json:"scopes"`
	Audiences []string `json:"audiences"`
}

type client struct{ clientConfig }

func (c *client) GetID() string                       { return c.ID }
func (c *client) RedirectURIs() []string              { return nil }
func (c *client) PostLogoutRedirectURIs() []string    { return nil }
func (c *client) ApplicationType() op.ApplicationType { return op.ApplicationTypeWeb }
func (c *client) AuthMethod() oidc.AuthMethod         { return oidc.AuthMethodBasic }
func (c *client) ResponseTypes() []oidc.ResponseType  { return nil }
func (c *client) GrantTypes() []oidc.GrantType {
	return []oidc.GrantType{oidc.GrantTypeClientCredentials, oidc.GrantTypeTokenExchange}
}
func (c *client) LoginURL(string) string               { return "" }
func (c *client) AccessTokenType() op.AccessTokenType  { return op.AccessTokenTypeJWT }
func (c *client) IDTokenLifetime() time.Duration       { return time.Hour }
func (c *client) DevMode() bool                        { return false }
func (c *client) IsScopeAllowed(scope string) bool     { return slices.Contains(c.Scopes, scope) }
func (c *client) IDTokenUserinfoClaimsAssertion() bool { return false }
func (c *client) ClockSkew() time.Duration             { return 0 }
func (c *client) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (c *client) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}

// token is what the tests see of an issued token: revoked tokens are kept, flagged.
type token struct {
	ID       string    `json:"id"`
	ClientID string    `json:"clientId"`
	Subject  string    `json:"subject"`
	Audience []string  `json:"audience"`
	Scopes   []string  `json:"scopes"`
	Grant    string    `json:"grant"`
	Expires  time.Time `json:"expires"`
	Revoked  bool      `json:"revoked"`
}

type key struct {
	id  string
	key *rsa.PrivateKey
}

func (k *key) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k *key) Key() any                                    { return k.key }
func (k *key) ID() string                                  { return k.id }

type publicKey struct{ *key }

func (k publicKey) Algorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k publicKey) Use() string                        { return "sig" }
func (k publicKey) Key() any                           { return &k.key.key.PublicKey }

type audienceKey struct{}

type storage struct {
	mu      sync.Mutex
	clients map[string]*client
	tokens  map[string]*token
	order   []string
	signing *key
	// The subject tokens of an exchange: Kubernetes ServiceAccount tokens, checked against
	// the API server's keys, issuer and the audience they were requested for.
	subjectKeys     *jose.JSONWebKeySet
	subjectIssuer   string
	subjectAudience string
}

var errNotImplemented = errors.New("not implemented: this server only mints for clients")

func (s *storage) client(id string) (*client, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.clients[id]
	return c, ok
}

// Authorization code flows: not served.
func (s *storage) CreateAuthRequest(context.Context, *oidc.AuthRequest, string) (op.AuthRequest, error) {
	return nil, errNotImplemented
}
func (s *storage) AuthRequestByID(context.Context, string) (op.AuthRequest, error) {
	return nil, errNotImplemented
}
func (s *storage) AuthRequestByCode(context.Context, string) (op.AuthRequest, error) {
	return nil, errNotImplemented
}
func (s *storage) SaveAuthCode(context.Context, string, string) error { return errNotImplemented }
func (s *storage) DeleteAuthRequest(context.Context, string) error    { return errNotImplemented }
func (s *storage) CreateAccessAndRefreshTokens(context.Context, op.TokenRequest, string) (string, string, time.Time, error) {
	return "", "", time.Time{}, oidc.ErrUnsupportedGrantType()
}
func (s *storage) TokenRequestByRefreshToken(context.Context, string) (op.RefreshTokenRequest, error) {
	return nil, op.ErrInvalidRefreshToken
}
func (s *storage) TerminateSession(context.Context, string, string) error { return nil }
func (s *storage) GetRefreshTokenInfo(context.Context, string, string) (string, string, error) {
	return "", "", op.ErrInvalidRefreshToken
}

func (s *storage) CreateAccessToken(ctx context.Context, request op.TokenRequest) (string, time.Time, error) {
	grant, clientID := "client_credentials", request.GetSubject()
	if te, ok := request.(op.TokenExchangeRequest); ok {
		grant, clientID = "token_exchange", te.GetClientID()
	}
	t := &token{
		ID: uuid.NewString(), ClientID: clientID, Subject: request.GetSubject(),
		Audience: request.GetAudience(), Scopes: request.GetScopes(), Grant: grant,
		Expires: time.Now().Add(5 * time.Minute),
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens[t.ID] = t
	s.order = append(s.order, t.ID)
	log.Printf("issued %s token %s to %s for %s", grant, t.ID, clientID, t.Subject)
	return t.ID, t.Expires, nil
}

func (s *storage) RevokeToken(ctx context.Context, tokenID, userID, clientID string) *oidc.Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tokens[tokenID]
	if !ok {
		return nil // RFC 7009 2.2: an unknown token is not an error
	}
	if t.ClientID != clientID {
		return oidc.ErrInvalidClient().WithDescription("token was not issued to this client")
	}
	t.Revoked = true
	log.Printf("revoked token %s", tokenID)
	return nil
}

func (s *storage) SigningKey(context.Context) (op.SigningKey, error) { return s.signing, nil }
func (s *storage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.RS256}, nil
}
func (s *storage) KeySet(context.Context) ([]op.Key, error) {
	return []op.Key{publicKey{s.signing}}, nil
}

func (s *storage) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	c, ok := s.client(id)
	if !ok {
		return nil, errors.New("client not found")
	}
	return c, nil
}

func (s *storage) AuthorizeClientIDSecret(ctx context.Context, id, secret string) error {
	c, ok := s.client(id)
	if !ok || c.Secret != secret {
		return errors.New("invalid client")
	}
	return nil
}

func (s *storage) SetUserinfoFromScopes(context.Context, *oidc.UserInfo, string, string, []string) error {
	return nil
}
func (s *storage) SetUserinfoFromToken(context.Context, *oidc.UserInfo, string, string, string) error {
	return nil
}

func (s *storage) SetIntrospectionFromToken(ctx context.Context, in *oidc.IntrospectionResponse, tokenID, subject, clientID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tokens[tokenID]
	if !ok || t.Revoked || time.Now().After(t.Expires) {
		return errors.New("token is not active")
	}
	in.Subject, in.Scope, in.ClientID, in.Audience = t.Subject, t.Scopes, t.ClientID, t.Audience
	return nil
}

// The scope travels in the JWT as the usual space-separated claim.
func (s *storage) GetPrivateClaimsFromScopes(ctx context.Context, userID, clientID string, scopes []string) (map[string]any, error) {
	return map[string]any{"scope": strings.Join(scopes, " ")}, nil
}
func (s *storage) GetKeyByIDAndClientID(context.Context, string, string) (*jose.JSONWebKey, error) {
	return nil, errNotImplemented
}
func (s *storage) ValidateJWTProfileScopes(context.Context, string, []string) ([]string, error) {
	return nil, errNotImplemented
}
func (s *storage) Health(context.Context) error { return nil }

// checkGrant refuses what the client may not ask for: a scope or an audience not configured.
func checkGrant(c *client, scopes, audience []string) error {
	for _, sc := range scopes {
		if !slices.Contains(c.Scopes, sc) {
			return oidc.ErrInvalidScope().WithDescription("scope %q not allowed", sc)
		}
	}
	for _, a := range audience {
		if !slices.Contains(c.Audiences, a) {
			return oidc.ErrInvalidTarget().WithDescription("audience %q not allowed", a)
		}
	}
	return nil
}

func (s *storage) ClientCredentials(ctx context.Context, id, secret string) (op.Client, error) {
	c, ok := s.client(id)
	if !ok || c.Secret != secret {
		return nil, errors.New("wrong client id or secret")
	}
	return c, nil
}

func (s *storage) ClientCredentialsTokenRequest(ctx context.Context, id string, scopes []string) (op.TokenRequest, error) {
	c, ok := s.client(id)
	if !ok {
		return nil, oidc.ErrInvalidClient()
	}
	audience, _ := ctx.Value(audienceKey{}).([]string)
	if err := checkGrant(c, scopes, audience); err != nil {
		return nil, err
	}
	if len(audience) == 0 {
		audience = []string{id}
	}
	return &oidc.JWTTokenRequest{Subject: id, Audience: audience, Scopes: scopes}, nil
}

func (s *storage) ValidateTokenExchangeRequest(ctx context.Context, request op.TokenExchangeRequest) error {
	if request.GetRequestedTokenType() == "" {
		request.SetRequestedTokenType(oidc.AccessTokenType)
	}
	if request.GetRequestedTokenType() != oidc.AccessTokenType {
		return oidc.ErrInvalidRequest().WithDescription("only access tokens are issued")
	}
	c, ok := s.client(request.GetClientID())
	if !ok {
		return oidc.ErrInvalidClient()
	}
	if err := checkGrant(c, request.GetScopes(), request.GetAudience()); err != nil {
		return err
	}
	request.SetCurrentScopes(request.GetScopes())
	return nil
}

func (s *storage) CreateTokenExchangeRequest(context.Context, op.TokenExchangeRequest) error {
	return nil
}

// The exchanged token says on whose behalf (sub) and which client acts (act.sub).
func (s *storage) GetPrivateClaimsFromTokenExchangeRequest(ctx context.Context, request op.TokenExchangeRequest) (map[string]any, error) {
	return map[string]any{
		"scope": strings.Join(request.GetScopes(), " "),
		"act":   map[string]any{"sub": request.GetClientID()},
	}, nil
}
func (s *storage) SetUserinfoFromTokenExchangeRequest(context.Context, *oidc.UserInfo, op.TokenExchangeRequest) error {
	return nil
}

type subjectClaims struct {
	Issuer    string        `json:"iss"`
	Subject   string        `json:"sub"`
	Audience  oidc.Audience `json:"aud"`
	Expiry    oidc.Time     `json:"exp"`
	NotBefore oidc.Time     `json:"nbf"`
}

// VerifyExchangeSubjectToken accepts a Kubernetes ServiceAccount token: signed by one of the
// API server's keys, from its issuer, for the configured audience, not expired.
func (s *storage) VerifyExchangeSubjectToken(ctx context.Context, raw string, tokenType oidc.TokenType) (string, string, map[string]any, error) {
	id, subject, claims, err := s.verifySubject(raw)
	if err != nil {
		log.Printf("subject token refused: %v", err)
	}
	return id, subject, claims, err
}

func (s *storage) verifySubject(raw string) (string, string, map[string]any, error) {
	if s.subjectKeys == nil {
		return "", "", nil, errors.New("no subject token keys configured")
	}
	sig, err := jose.ParseSigned(raw, []jose.SignatureAlgorithm{jose.RS256, jose.ES256})
	if err != nil {
		return "", "", nil, err
	}
	var payload []byte
	for _, k := range s.subjectKeys.Keys {
		if payload, err = sig.Verify(k); err == nil {
			break
		}
	}
	if payload == nil {
		return "", "", nil, errors.New("subject token signature not verified")
	}
	var cl subjectClaims
	if err := json.Unmarshal(payload, &cl); err != nil {
		return "", "", nil, err
	}
	now := time.Now()
	switch {
	case cl.Issuer != s.subjectIssuer:
		return "", "", nil, fmt.Errorf("subject token issuer %q", cl.Issuer)
	case !slices.Contains(cl.Audience, s.subjectAudience):
		return "", "", nil, fmt.Errorf("subject token audience %v", cl.Audience)
	case now.After(cl.Expiry.AsTime()):
		return "", "", nil, errors.New("subject token expired")
	}
	log.Printf("verified subject token of %s", cl.Subject)
	return raw, cl.Subject, nil, nil
}

func (s *storage) VerifyExchangeActorToken(context.Context, string, oidc.TokenType) (string, string, map[string]any, error) {
	return "", "", nil, errors.New("actor tokens are not accepted")
}

func (s *storage) listTokens(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	out := make([]*token, 0, len(s.order))
	for _, id := range s.order {
		out = append(out, s.tokens[id])
	}
	body, _ := json.Marshal(out)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	issuer := flag.String("issuer", "", "issuer URL (https)")
	cert := flag.String("tls-cert", "", "TLS certificate (PEM)")
	tlsKey := flag.String("tls-key", "", "TLS key (PEM)")
	clientsFile := flag.String("clients", "", "JSON list of clients")
	jwks := flag.String("subject-jwks", "", "JWKS of the subject tokens (the API server's /openid/v1/jwks)")
	subjectIssuer := flag.String("subject-issuer", "", "issuer of the subject tokens")
	subjectAudience := flag.String("subject-audience", "", "audience the subject tokens must carry")
	portFile := flag.String("port-file", "", "write the bound port here once listening")
	flag.Parse()

	var configs []clientConfig
	data, err := os.ReadFile(*clientsFile)
	if err != nil {
		log.Fatal(err)
	}
	if err := json.Unmarshal(data, &configs); err != nil {
		log.Fatal(err)
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		log.Fatal(err)
	}
	s := &storage{
		clients: map[string]*client{}, tokens: map[string]*token{},
		signing:       &key{id: uuid.NewString(), key: rsaKey},
		subjectIssuer: *subjectIssuer, subjectAudience: *subjectAudience,
	}
	for _, c := range configs {
		s.clients[c.ID] = &client{c}
	}
	if *jwks != "" {
		data, err := os.ReadFile(*jwks)
		if err != nil {
			log.Fatal(err)
		}
		s.subjectKeys = new(jose.JSONWebKeySet)
		if err := json.Unmarshal(data, s.subjectKeys); err != nil || len(s.subjectKeys.Keys) == 0 {
			log.Fatalf("no keys in %s (%v)", *jwks, err)
		}
	}
	var cryptoKey [32]byte
	if _, err := rand.Read(cryptoKey[:]); err != nil {
		log.Fatal(err)
	}
	provider, err := op.NewOpenIDProvider(*issuer, &op.Config{CryptoKey: cryptoKey, AuthMethodPost: true}, s)
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /test/tokens", s.listTokens)
	mux.Handle("/", provider)
	// op's client credentials request has no audience parameter: carry it to the storage.
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.ParseForm() == nil && len(r.PostForm["audience"]) > 0 {
			r = r.WithContext(context.WithValue(r.Context(), audienceKey{}, r.PostForm["audience"]))
		}
		mux.ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	if *portFile != "" {
		port := ln.Addr().(*net.TCPAddr).Port
		if err := os.WriteFile(*portFile, []byte(fmt.Sprint(port)), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	log.Printf("serving on %s", ln.Addr())
	log.Fatal(http.ServeTLS(ln, handler, *cert, *tlsKey))
}
