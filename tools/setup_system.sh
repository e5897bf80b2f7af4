#!/usr/bin/env bash
# System set-up for tests and benchmarks. Best effort: every step warns clearly and goes on,
# so a machine without root still runs the tests that need none (the rest skip with a reason).
set -u
warn() { echo "setup: WARNING: $*" >&2; }

need_pkgs=()
command -v tshark >/dev/null 2>&1 || need_pkgs+=(tshark)
command -v iperf3 >/dev/null 2>&1 || need_pkgs+=(iperf3)
command -v ip >/dev/null 2>&1 || need_pkgs+=(iproute2)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing ${need_pkgs[*]}"
    export DEBIAN_FRONTEND=noninteractive
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections 2>/dev/null || true
    (apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}") >/dev/null 2>&1 \
      || warn "could not install ${need_pkgs[*]}; tests that need them will skip"
  else
    warn "not root or no apt-get: ${need_pkgs[*]} missing; tests that need them will skip"
  fi
fi

# Large socket buffers for the UDP datapath (64 MiB). Not permitted without root.
for key in net.core.rmem_max net.core.wmem_max; do
  cur=$(sysctl -n "$key" 2>/dev/null || echo 0)
  if [ "${cur:-0}" -lt 67108864 ]; then
    sysctl -q -w "$key=67108864" >/dev/null 2>&1 \
      || warn "cannot raise $key (now $cur): UDP receive buffers stay small and may drop at high rates"
  fi
done
# pyverbs (rdma-core's Python bindings) for the verbs backend's unit tests; the backend adds
# Debian's dist-packages to sys.path itself when the venv cannot import it.
if ! /usr/bin/python3 -c "import pyverbs" >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing python3-pyverbs"
    (export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq python3-pyverbs) >/dev/null 2>&1 \
      || warn "could not install python3-pyverbs; verbs unit tests will skip"
  else
    warn "not root or no apt-get: python3-pyverbs missing; verbs unit tests will skip"
  fi
fi
# Loopback traffic is queued per CPU in the backlog (default 1000 packets); batched UDP
# senders (sendmmsg) can overrun it in one burst. Drops show in /proc/net/softnet_stat.
cur=$(sysctl -n net.core.netdev_max_backlog 2>/dev/null || echo 0)
if [ "${cur:-0}" -lt 10000 ]; then
  sysctl -q -w net.core.netdev_max_backlog=10000 >/dev/null 2>&1 \
    || warn "cannot raise net.core.netdev_max_backlog (now $cur): bursts on loopback may drop"
fi
exit 0
