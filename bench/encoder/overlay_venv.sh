# Sourced by bench/encoder/venv.sh and infinity_venv.sh:
#   MakeOverlayVenv VENV
# creates VENV (when missing) with the project venv's Python and a .pth file
# that appends the project venv's site-packages, so a peer's own pins win
# but torch is the wheel Gantry's libtorch comes from (no second torch).
MakeOverlayVenv() {
  local venv="$1" root project_venv project_site own_site
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  project_venv="${GANTRY_VENV:-${root}/.venv}"
  if [[ ! -x "${project_venv}/bin/python" ]]; then
    echo "$(basename "$0"): error: no project venv at ${project_venv} (run scripts/setup.sh first)" >&2
    exit 1
  fi
  if [[ ! -x "${venv}/bin/python" ]]; then
    "$(readlink -f "${project_venv}/bin/python")" -m venv "${venv}"
  fi
  project_site="$("${project_venv}/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  own_site="$("${venv}/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  echo "${project_site}" >"${own_site}/gantry-project-venv.pth"
}
