# Sourced by install-test-deps.sh and build-images.sh: install the Debian packages a script
# found missing, as root; otherwise stop with the exact command to run.
#
# usage: install_debian_packages <script name> <package>...   (no packages: nothing to do)

install_debian_packages() {
    local script=$1
    shift
    [[ $# -gt 0 ]] || return 0
    if [[ "$(id -u)" -ne 0 ]]; then
        echo "${script}: missing Debian packages; run as root:" >&2
        echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends $*" >&2
        exit 1
    fi
    echo "installing Debian packages: $*" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2
}
