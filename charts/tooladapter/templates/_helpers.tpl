{{/*
The prefix of every object name, cluster-scoped ones included (ClusterRoles, admission
policies): `tooladapter` unless a second release must run beside the first.
*/}}
{{- define "tooladapter.prefix" -}}
{{- required "prefix must be set" .Values.prefix | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object of the release (part-of comes from manifests/ or below). */}}
{{- define "tooladapter.labels" -}}
app.kubernetes.io/name: tooladapter
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Selector labels of one component: `include "tooladapter.selector" (list . "operator")`. */}}
{{- define "tooladapter.selector" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: tooladapter
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* All labels of one component's objects. */}}
{{- define "tooladapter.componentLabels" -}}
{{- $root := index . 0 -}}
{{ include "tooladapter.labels" $root }}
app.kubernetes.io/part-of: tooladapter
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "tooladapter.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ $tag }}
{{- end -}}
{{- end -}}

{{/* The pod securityContext of every pod of the chart (default: the restricted profile). */}}
{{- define "tooladapter.podSecurityContext" -}}
{{- toYaml .Values.podSecurityContext -}}
{{- end -}}

{{- define "tooladapter.containerSecurityContext" -}}
{{- toYaml .Values.securityContext -}}
{{- end -}}

{{/*
The annotations of a ServiceAccount (IRSA, Workload Identity):
`include "tooladapter.serviceAccountAnnotations" (list . "operator")`, or "egress-proxy".
Empty when none are set. hack/sync_chart.py puts it into the generated ServiceAccounts.
*/}}
{{- define "tooladapter.serviceAccountAnnotations" -}}
{{- $root := index . 0 -}}
{{- $values := ternary $root.Values.egressProxy.serviceAccount $root.Values.serviceAccount (eq (index . 1) "egress-proxy") -}}
{{- with $values.annotations -}}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end -}}
{{- end -}}

{{/*
The API server as pods reach it: the in-cluster `kubernetes` Service unless
apiServer.host is set (clusters without kube-proxy; see values.yaml).
*/}}
{{- define "tooladapter.apiServerEnv" -}}
{{- with .Values.apiServer.host -}}
- {name: KUBERNETES_SERVICE_HOST, value: {{ . | quote }}}
- {name: KUBERNETES_SERVICE_PORT, value: {{ required "apiServer.port must be set with apiServer.host" $.Values.apiServer.port | toString | quote }}}
{{- end -}}
{{- end -}}

{{/*
The egress proxy's grants' namespace (TOOLADAPTER_EGRESS_NAMESPACE): lease grants (Secrets)
and connection records only, so the proxy, which may read Secrets there, reads no other.
*/}}
{{- define "tooladapter.egressNamespace" -}}
{{- .Values.egressProxy.grantsNamespace | default (printf "%s-egress" (include "tooladapter.prefix" .)) -}}
{{- end -}}
