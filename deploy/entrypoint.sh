#!/bin/sh
# The container image's entrypoint (/usr/bin/sigserve-entrypoint): execs sigserve with the
# arguments given, so that sigserve is PID 1 and gets SIGTERM itself. Before that, when the config
# or a file it names (weights, CURVE's secret certificate and allowlist folder) exists but this
# container's user cannot read it, it says how to run the container so that it can. The case it is for: safetensors writes its files 0600, owned by
# whoever saved the model, and the image runs as uid 10001; mounting such a file (even :ro) gives
# sigserve "Permission denied" and nothing more. The fix is to run the container as the file's
# owner (`--user "$(id -u):$(id -g)"` in that user's shell), which the image supports: nothing in
# it needs uid 10001 (docs/deploy.md).
#
# Only a hint: sigserve still starts and reports the error (and its exit code) itself. The paths
# are found with grep, which is enough for what `"weights": "PATH"` looks like in practice (a path
# with a JSON escape in it is not checked here; sigserve still reads it right).
config=
prev=
for arg in "$@"; do
    case $prev in --config|--check-config) config=$arg ;; esac
    case $arg in --config=*|--check-config=*) config=${arg#*=} ;; esac
    prev=$arg
done

uid=$(id -u)
json=no

# say MESSAGE: one line on stderr, as a JSON log line when the config logs JSON.
say () {
    if [ $json = yes ]; then
        msg=$(printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g')
        printf '{"ts":"%s","level":"error","msg":"sigserve-entrypoint: %s"}\n' \
            "$(date -u +%Y-%m-%dT%H:%M:%S.%6NZ)" "$msg" >&2
    else
        printf 'sigserve-entrypoint: %s\n' "$1" >&2
    fi
}

# hint PATH: PATH (a file, or a folder on the way to one) exists and this user cannot use it.
hint () {
    owner=$(stat -c '%u:%g' "$1" 2>/dev/null) || return 0
    mode=$(stat -c '%a' "$1" 2>/dev/null)
    case $owner in
        0:*) say "cannot read $1 as uid $uid (mode 0$mode, owner root): make it readable by uid $uid, or use a copy you own and run the container as you: --user \"\$(id -u):\$(id -g)\" (docs/deploy.md, 'Your weights')" ;;
        *) say "cannot read $1 as uid $uid (mode 0$mode, owner $owner): run the container as its owner, --user $owner (in that user's shell: --user \"\$(id -u):\$(id -g)\"), or make it readable by uid $uid (docs/deploy.md, 'Your weights')" ;;
    esac
}

# check PATH: hint when PATH, or the deepest folder of it that exists, cannot be read or searched.
check () {
    if [ -d "$1" ]; then
        [ -r "$1" ] && [ -x "$1" ] || hint "$1"
        return 0
    elif [ -e "$1" ]; then
        [ -r "$1" ] || hint "$1"
        return 0
    fi
    dir=$(dirname "$1")
    while [ "$dir" != / ] && [ "$dir" != . ] && [ ! -e "$dir" ]; do dir=$(dirname "$dir"); done
    if [ -d "$dir" ] && [ ! -x "$dir" ]; then hint "$dir"; fi
    return 0
}

if [ -n "$config" ]; then
    check "$config"
    if [ -r "$config" ] && [ -f "$config" ]; then
        grep -q '"log_format"[[:space:]]*:[[:space:]]*"json"' "$config" && json=yes
        base=$(dirname "$config")
        # Weights, and CURVE's secret certificate and allowlist folder (0600 as --keygen writes it).
        grep -oE '"(weights|secret_key_file|allowed_clients)"[[:space:]]*:[[:space:]]*"[^"\\]*"' "$config" |
            sed -E 's/^"[a-z_]+"[[:space:]]*:[[:space:]]*"(.*)"$/\1/' |
            while IFS= read -r path; do
                case $path in /*) ;; *) path=$base/$path ;; esac
                check "$path"
            done
    fi
fi
exec sigserve "$@"
