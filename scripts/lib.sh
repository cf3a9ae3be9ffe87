# Shared by scripts/test and scripts/demo: make sure redis-server,
# redis-cli and redis-sentinel (for the Sentinel failover tests) exist,
# and (for scripts/test) spin and gcc, which check the models in model/,
# and valgrind, which counts what operations cost Redis.
ensure_redis() {
  if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1 &&
    command -v redis-sentinel >/dev/null 2>&1; then
    return
  fi
  echo "redis-server, redis-cli or redis-sentinel not found; installing them from the Debian packages..." >&2
  apt_install redis-server redis-sentinel
}

ensure_spin() {
  if command -v spin >/dev/null 2>&1 && command -v gcc >/dev/null 2>&1; then
    return
  fi
  echo "spin or gcc not found; installing them from the Debian packages..." >&2
  apt_install spin gcc
}

# ensure_valgrind: redistest.StartCounted runs redis-server under
# valgrind's callgrind to count what operations cost Redis.
ensure_valgrind() {
  if command -v valgrind >/dev/null 2>&1 && command -v callgrind_control >/dev/null 2>&1; then
    return
  fi
  echo "valgrind not found; installing it from the Debian packages..." >&2
  apt_install valgrind
}

# apt_install installs Debian packages, as root or with sudo.
apt_install() {
  local sudo=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "need root (or sudo) to apt-get install $*" >&2; exit 1; }
    sudo=sudo
  fi
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >&2
}
