#!/usr/bin/env bash
# Fetch Redis's own Tcl test suite (tests/ and runtest) from Debian's source
# package of the installed redis-server, into .cache/redis-src/ (git-ignored).
# Idempotent: does nothing when the tree is already there.
#
# Needs, and installs as root (or through `sudo -n`) when missing: a deb-src
# entry for the Debian archive (written as
# /etc/apt/sources.list.d/rproxy-deb-src.sources, same URIs, suites and
# Signed-By key as the system's deb entries), dpkg-dev (dpkg-source) and tcl.
#
# Prints the path of the unpacked source tree on stdout.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
CACHE=${REDIS_SRC_CACHE:-$ROOT/.cache/redis-src}

have() { command -v "$1" >/dev/null 2>&1; }
log() { echo "fetch-redis-tests: $*" >&2; }

if [ "$(id -u)" -eq 0 ]; then
	SUDO=()
elif have sudo && sudo -n true 2>/dev/null; then
	SUDO=(sudo -n)
else
	SUDO=(false)
fi
apt_install() {
	if [ "${SUDO[0]:-}" = false ]; then
		log "missing $*: run  sudo apt-get install -y $*"
		exit 1
	fi
	"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

bash scripts/ensure-redis.sh

# The source version to fetch: the one the installed redis-server was built from.
SRCVER=$(dpkg-query -W -f='${source:Version}' redis-server 2>/dev/null || true)
if [ -z "$SRCVER" ]; then
	log "redis-server is not installed from a Debian package; cannot pick a source version"
	exit 1
fi
UPVER=${SRCVER#*:}
UPVER=${UPVER%%-*}
DIR=$CACHE/redis-$UPVER

if ! have tclsh; then
	log "installing tcl"
	"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	apt_install tcl
fi

if [ -f "$DIR/tests/test_helper.tcl" ] && [ -x "$DIR/runtest" ]; then
	echo "$DIR"
	exit 0
fi

if ! have dpkg-source; then
	log "installing dpkg-dev (for apt-get source)"
	"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	apt_install dpkg-dev
fi

# A deb-src entry mirroring the system's deb entries (deb822 files first, then
# one-line sources.list entries), with their Signed-By keyring.
SRCFILE=/etc/apt/sources.list.d/rproxy-deb-src.sources
have_deb_src() {
	grep -rqsE '^(Types:.*deb-src|deb-src )' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null
}
if ! have_deb_src; then
	entries=""
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] || continue
		# Debian archive entries only (not third-party repositories).
		grep -qE '^URIs:.*(deb\.debian\.org|debian\.org/debian|snapshot\.debian\.org)' "$f" || continue
		entries+=$(awk '
			/^[[:space:]]*$/ { if (blk != "" && deb) print blk "\n"; blk=""; deb=0; next }
			/^Types:/ { if ($0 ~ /[[:space:]]deb([[:space:]]|$)/) deb=1; blk = blk "Types: deb-src\n"; next }
			/^#/ { next }
			{ blk = blk $0 "\n" }
			END { if (blk != "" && deb) print blk "\n" }' "$f")
		entries+=$'\n'
	done
	if [ -z "${entries//[$'\n ']/}" ] && [ -f /etc/apt/sources.list ]; then
		entries=$(sed -nE 's/^deb (\[[^]]*\] )?(https?:[^ ]*debian[^ ]*) ([^ ]+) (.*)$/Types: deb-src\nURIs: \2\nSuites: \3\nComponents: \4\nSigned-By: \/usr\/share\/keyrings\/debian-archive-keyring.gpg\n/p' /etc/apt/sources.list)
	fi
	if [ -z "${entries//[$'\n ']/}" ]; then
		log "no Debian archive entry found in /etc/apt to derive a deb-src entry from"
		exit 1
	fi
	if [ "${SUDO[0]:-}" = false ]; then
		log "no deb-src entry and not root: add one to $SRCFILE, e.g.:"
		printf '%s\n' "$entries" >&2
		exit 1
	fi
	log "writing $SRCFILE"
	printf '%s\n' "$entries" | "${SUDO[@]}" tee "$SRCFILE" >/dev/null
	"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
elif ! apt-cache showsrc "redis=$SRCVER" 2>/dev/null | grep -q '^Package: redis'; then
	"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
fi

mkdir -p "$CACHE"
log "apt-get source redis=$SRCVER into $CACHE"
(cd "$CACHE" && apt-get source -qq "redis=$SRCVER" >&2)
# apt-get source names the directory redis-<upstream version>.
if [ ! -f "$DIR/tests/test_helper.tcl" ]; then
	log "apt-get source finished but $DIR/tests/test_helper.tcl is missing"
	exit 1
fi
echo "$DIR"
