#!/usr/bin/env bash
# Run HERE, on a Debian 12 machine with network (the development machine), before going to a GPU
# machine: downloads (apt-get download, installs nothing) the Debian packages tesserad and the CLI
# are built from, into docs/validation/debs/ (ignored by git). Copy the repository with that
# folder to the GPU machine; setup.sh unpacks them there (dpkg-deb -x, no root, nothing installed)
# and builds against them. The shims and simgpu need none of them.
set -euo pipefail
cd "$(dirname "$0")"
PACKAGES=(
  # one library per job (the -dev package and its shared library where it has one)
  libyaml-cpp-dev libyaml-cpp0.7 nlohmann-json3-dev libcli11-dev
  libcpp-httplib-dev libcpp-httplib0.11
  # what httplib.h includes and libcpp-httplib links (its pkg-config file requires them)
  libssl-dev libssl3 zlib1g-dev libbrotli-dev libbrotli1
  # pkg-config, for a machine without it
  pkgconf pkgconf-bin libpkgconf3
)
mkdir -p debs
cd debs
apt-get download "${PACKAGES[@]}"
ls -1 ./*.deb
echo "fetch_packages.sh: $(ls ./*.deb | wc -l) packages in docs/validation/debs; copy the repository to the GPU machine"
