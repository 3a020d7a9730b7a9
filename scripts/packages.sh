#!/bin/sh
# Print the Debian packages of scripts/packages.txt that have any of the given
# roles (build, test, runtime), one a line. Used by scripts/setup.sh and
# deploy/Dockerfile, so both install from the same list.
# Usage: scripts/packages.sh ROLE...
set -eu
[ $# -gt 0 ] || { echo "usage: $0 ROLE..." >&2; exit 2; }
exec awk -v roles="$*" '
  BEGIN { n = split(roles, want, " "); for (i = 1; i <= n; i++) ok[want[i]] = 1 }
  /^[ \t]*#/ || NF == 0 { next }
  { for (i = 2; i <= NF; i++) if ($i in ok) { print $1; next } }
' "$(dirname "$0")/packages.txt"
