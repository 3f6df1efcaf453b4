#!/usr/bin/env bash
# Installs what the tests need on a fresh Debian bookworm machine, as root. Idempotent.
#  - Mesa lavapipe (Vulkan on the CPU) from bookworm-backports: Dawn rejects bookworm's Mesa 22.
#  - Debian chromium: the e2e browser, and the source of the SwiftShader Vulkan ICD fallback.
# Node packages are installed by `npm ci` separately (see .ci/run).
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
  echo "setup-machine.sh: run as root (apt-get is used)" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
BACKPORTS=/etc/apt/sources.list.d/bookworm-backports.sources
if [ ! -f "$BACKPORTS" ]; then
  cat > "$BACKPORTS" <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  NEED_UPDATE=1
fi

have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
lvp_ok() { [ -f /usr/share/vulkan/icd.d/lvp_icd.json ] && dpkg-query -W -f='${Version}' mesa-vulkan-drivers 2>/dev/null | grep -qE '^(2[3-9]|[3-9][0-9])\.'; }

if ! have_pkg chromium || ! lvp_ok || ! have_pkg libvulkan1; then
  apt-get update -q
  apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core libvulkan1 ca-certificates
  apt-get install -y -q --no-install-recommends -t bookworm-backports mesa-vulkan-drivers
else
  echo "setup-machine.sh: chromium, libvulkan1 and mesa-vulkan-drivers $(dpkg-query -W -f='${Version}' mesa-vulkan-drivers) already installed"
fi

echo "setup-machine.sh: chromium $(chromium --version 2>/dev/null | head -1)"
echo "setup-machine.sh: mesa-vulkan-drivers $(dpkg-query -W -f='${Version}' mesa-vulkan-drivers)"
ls /usr/share/vulkan/icd.d/ /usr/lib/chromium/vk_swiftshader_icd.json 2>/dev/null || true
