#!/usr/bin/env bash
# Prepares .device/ (git-ignored), what the device tool carries to the GPU machine, which has no
# package registry and no Node: run here after `npm install`, then call the device tool with
#   carry: [".device"]   command: "bash scripts/device/run.sh [parts]"
# Contents (about 40 MiB of the 64 MiB a call may carry, with the working tree):
#   node.xz                       this machine's Node binary (x86-64), xz-compressed
#   js/                           tests/gpu, benchmarks and the trainer bundled by build.mjs
#   js/node_modules/webgpu/       the webgpu package's loader and its linux-x64 Dawn binary (xz)
#   debs/                         the Vulkan loader and GLVND (NVIDIA's Vulkan ICD, libGLX_nvidia, is
#                                 on the machine but needs GLVND's libGLdispatch to create an instance)
set -euo pipefail
cd "$(dirname "$0")/../.."
[[ $(uname -m) == x86_64 ]] || { echo "bundle.sh: the device machine is x86-64; build this on x86-64" >&2; exit 2; }
[[ -d node_modules/webgpu ]] || { echo "bundle.sh: run npm install first" >&2; exit 2; }

rm -rf .device/js .device/debs
mkdir -p .device/debs
node scripts/device/build.mjs

wg=.device/js/node_modules/webgpu
mkdir -p "$wg/dist/linux-x64"
cp node_modules/webgpu/index.js node_modules/webgpu/package.json "$wg/"
xz -T2 -6 -c node_modules/webgpu/dist/linux-x64/dawn.node >"$wg/dist/linux-x64/dawn.node.xz"

node_bin=$(readlink -f "$(command -v node)")
if [[ ! -f .device/node.xz || .device/node.xz -ot "$node_bin" ]]; then
  xz -T2 -9 -c "$node_bin" >.device/node.xz
fi
node -v >.device/node.version

# The Vulkan loader, as the device tool's README describes (amd64 packages from Debian's archive).
lists=/tmp/amd64-apt-lists
mkdir -p "$lists/partial"
o=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists="$lists")
apt-get "${o[@]}" update -qq
(cd .device/debs && apt-get "${o[@]}" download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 >/dev/null)

du -sh .device .device/* | sed 's/^/  /'
echo "device bundle ready: carry [\".device\"], run \"bash scripts/device/run.sh\""
