#!/usr/bin/env bash
# Build the local test image of the docker terminal sandbox, without any registry.
#
# The image is a skeleton root file system: empty mount points, the merged-/usr symlinks
# (bin -> usr/bin, ...) and a copy of the host's /etc without secrets. The toolchain comes
# from the host at run time: DockerSandboxConfig.host_mounts binds the host's /usr, the
# virtual environment and its base interpreter read-only (tests/sandbox_pool/terminal
# and benchmarks/sandbox do this; see docs/sandbox.md). Nothing is downloaded.
#
# Usage: docker/build_test_image.sh [TAG]      (default tag: cuda-agent-sandbox-test:latest)
set -euo pipefail

tag="${1:-cuda-agent-sandbox-test:latest}"
root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT

mkdir -p "$root"/{usr,tmp,workspace,proc,dev,sys,run,root,home,opt,var/tmp,mnt,.sandbox}
chmod 1777 "$root/tmp" "$root/var/tmp"
# /sbin stays a real directory: docker's --init binds docker-init at /sbin/docker-init,
# which cannot be created through a symlink into the read-only /usr mount.
mkdir -p "$root/sbin"
for link in bin lib lib64; do
    if [ -L "/$link" ]; then
        ln -s "$(readlink "/$link")" "$root/$link"
    else
        mkdir -p "$root/$link"   # non-merged /usr host: bind them via host_mounts too
    fi
done
# /etc: configuration the toolchain needs (ld.so.cache, alternatives, passwd, profile),
# without the host's secrets.
tar -C / -cf - \
    --exclude='etc/shadow*' --exclude='etc/gshadow*' --exclude='etc/ssh' \
    --exclude='etc/ssl/private' --exclude='etc/docker' --exclude='etc/sudoers*' \
    etc 2>/dev/null | tar -C "$root" -xf -

tar -C "$root" --numeric-owner -cf - . | docker import \
    --change 'WORKDIR /workspace' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/sleep", "infinity"]' \
    --message "cuda-agent sandbox test image (skeleton; host toolchain bind-mounted)" \
    - "$tag" >/dev/null
echo "$tag"
