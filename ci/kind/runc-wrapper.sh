#!/bin/sh
# An OCI runtime for dockerd on machines whose capability bounding set lacks some
# capabilities (installed by ci/kind/docker.sh up, which fills in the two values below).
# `docker run --privileged` asks for every capability and runc refuses to set one the
# bounding set lacks; this removes those from the container's configuration (create, run)
# or from the process of an `exec`, then runs runc with the same arguments.
runc=@RUNC@
drop="@DROP@"

# $1: a JSON file; $2: the jq path of its capabilities object.
strip() {
  [ -f "$1" ] || return 0
  tmp="$1.opconform.$$"
  jq --arg drop "$drop" "if $2 then $2 |= map_values(if type == \"array\" then (\$drop | split(\" \")) as \$d | map(select(. as \$c | \$d | index(\$c) | not)) else . end) else . end" "$1" >"$tmp" &&
    cat "$tmp" >"$1"
  rm -f "$tmp"
}

command=""
bundle="."
process=""
previous=""
for arg in "$@"; do
  case "$previous" in
    --bundle | -b) bundle=$arg ;;
    --process | -p) process=$arg ;;
  esac
  case "$arg" in
    --bundle=*) bundle=${arg#--bundle=} ;;
    --process=*) process=${arg#--process=} ;;
  esac
  if [ -z "$command" ]; then
    case "$arg" in create | run | exec) command=$arg ;; esac
  fi
  previous=$arg
done
case "$command" in
  create | run) strip "$bundle/config.json" ".process.capabilities" ;;
  exec) [ -n "$process" ] && strip "$process" ".capabilities" ;;
esac
exec "$runc" "$@"
