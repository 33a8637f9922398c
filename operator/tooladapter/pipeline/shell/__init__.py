"""Shell command checks on parsed argv: block-list patterns, evasions, and the allow list.

Why it works on argv and not on strings: a block list of strings ("rm -rf") is beaten by
`rm -r -f`, `rm -fr`, `/bin/rm --recursive --force`, `'r''m' -rf` or `sudo rm -rf`. So the
command line is parsed once, the way it will be executed (POSIX `shlex`, no comments),
and the rules are applied to the resulting argv:

1. Refusals that no policy can override (`escalate_ok` is False): empty or over-long
   commands, control or invisible characters (newlines included), unparseable quoting,
   shell operators (`;`, `&&`, `||`, `|`, `&`, `>`, `<`, `(`), and expansions
   (`$(...)`, backticks, `${...}`, `$VAR`, `$'...'`). Tools run argv without a shell, so
   these have no legitimate use, and when a descriptor does opt into a shell they are
   exactly how a checked command turns into an unchecked one.
2. Nested command strings (`sh -c`, `bash -lc`, `su -c`, `env -S` and `env -vS'...'`,
   `flock -c`, `watch`, `eval`, ...) are checked recursively with the same rules,
   wherever they appear in argv (`sudo bash -c ...`).
3. Block-list patterns (`escalate_ok` is True: the tenant policy decides between deny
   and escalation to production). A pattern is `program [flags] [words]`: the program
   matches any argv token by basename, case-insensitively, with globs in the token
   honoured (`/bin/r?`), so wrappers (`env`, `sudo`, `nice`, `timeout`, `xargs`,
   `find -exec`, `busybox`, ...) need no special cases; short flags match as a set in any
   clustering (`-rf` = `-r -f` = `-fr` = `-Rf`), long flags and GNU prefixes map to short
   ones (`--recursive`, `--rec`); words match in order among the remaining tokens
   (`kubectl -n x delete ns/foo`). The same matcher runs over word splits of every
   token with embedded text, with SQL comments stripped, quoted fragments joined and
   Unicode normalised, which catches `psql -c "DrOp/**/DataBase x"`, `DROP SCHEMA`
   (MySQL's synonym) and `python -c "os.system('rm -fr /')"`.
   The matching is deliberately conservative: a false block is a clear, fixable denial;
   a false pass is an incident.
4. The allow list. A command runs as its declared class only when it is *listed*:
   every command it runs matches an allow entry by argv-prefix tokens (`argv[0]` is
   reduced to its basename only when it is an absolute path into a standard bin
   directory). What a command runs is found by unwrapping wrappers: `env` (assignments
   make it unlisted: `LD_PRELOAD`, `GIT_EXTERNAL_DIFF` change what a listed program
   does), `sudo`, `doas`, `xargs`, `nice`, `timeout`, `nohup`, `stdbuf`, `time`,
   `ionice`, `setsid`, `taskset`, `chroot`, `busybox`, `command`, `exec`, the command
   strings of `sh -c`, `su -c`, `flock -c`, `env -S`, `watch` and `eval`, and each
   `find -exec` command. So an allow entry for a wrapper never lists what it runs.
   Beyond that, a listed program is not listed with:
   - inline code: interpreters with `-c`/`-e`/`-m`/... (`python3 -c`, `perl -e`,
     `node -e`, `ruby -e`, `php -r`, ...), awk programs that call `system` or
     redirect, sed scripts that execute or write (`e`, `w`), SQL clients' shell escapes
     (`psql -c '\\! ...'`, `mysql -e 'system ...'`, `sqlite3 '.shell ...'`); and
     programs whose purpose is to run another command (`strace`, `ssh`, `pwsh`, ...).
     What they run cannot be judged, so no allow entry covers them;
   - an option that deletes, writes elsewhere, uploads or runs a helper (`find -delete`,
     `rsync --delete`/`-e`, `tar --to-command`, `git diff --output`/`--ext-diff`,
     `git -c`, `dotnet build -p:PreBuildEvent=...`, `npm test --script-shell`,
     `sed -i`, `curl -T`/`-d`/`-X`, `wget --post-file`, `nc -e`, `make VAR=...`, ...),
     unless the allow entry itself names that option (`rsync -a --delete` lists
     `rsync -a --delete src dst`).
   An unlisted command is not refused here: classification raises it (see
   `classification.classify`), so it waits for an approval or is denied by policy.

The allow list in force is the descriptor's `shell.allow`, or the reference's
`DEFAULT_ALLOW_LIST` when the descriptor sets none (`allow_list_for`); tenant policies'
`shell.allow` lists narrow it (`narrow`: a command must be on both).

The parts, bottom to top (each imports only ones above it; a layers contract in
pyproject.toml keeps it so):

- `verdict`: `ShellVerdict`, the `ShellRule`s that refuse a command, how reasons quote it.
- `programs`: program names (basenames, standard bin paths, the shells).
- `parsing`: one command line into argv, with the refusals of rule 1.
- `options`: getopt-style parsing of a program's options.
- `nesting`: the command strings nested in argv (rule 2) and their wrappers' options.
- `block`: `DEFAULT_BLOCK_LIST`, block patterns and their matching (rule 3).
- `unwrapping`: what a command runs, wrappers unwrapped (rule 4).
- `interpreters`: inline code, runners and script files (rule 4, never covered).
- `effects`: effect options (rule 4, covered only when the entry names them).
- `allow`: `DEFAULT_ALLOW_LIST`, `allow_list_for` and the listing (rule 4).
- `check`: `check_command`, which ties them together.

Importers take a name from the module that defines it; this package re-exports nothing.
"""
