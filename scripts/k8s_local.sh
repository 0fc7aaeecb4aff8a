#!/usr/bin/env bash
# The project's test cluster: a real Kubernetes control plane (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler) with kwok-simulated CPU and GPU nodes, built only
# from Debian packages and the Go module proxy (no container registry, no prebuilt binaries).
# It proves what the API server, the scheduler and the controllers enforce (CRD schemas and CEL
# rules, GPU accounting, taints, Pending on Insufficient nvidia.com/gpu) without a kubelet.
# Approach measured in ../shared/notes/kubernetes_local.md; see docs/deploy.md "The test cluster".
#
# Usage: scripts/k8s_local.sh SUBCOMMAND...   (several run in order: `build crds`)
#   build   etcd (apt), kube-apiserver/-controller-manager/-scheduler and kubectl (from the
#           k8s.io/kubernetes module), kwok and helm (go install); cached, a rerun takes seconds
#   crds    KEDA and JobSet CRDs from their Go modules into the cache (Strimzi and LWS are in
#           deploy/k8s/crds/: no registry serves them)
#   up      start the cluster in $K8S_RUN, create deploy/k8s/test-nodes.yaml, install the CRDs
#   down    stop what `up` started, wait for the exits, remove the run state (logs are kept)
#   env     print export lines (KUBECONFIG, PATH with kubectl, kwok and helm)
#   status  which components run, and the recorded timings
#
# `build` and `crds` hold $CACHE/build.lock: a second build waits for the first (scripts/test.sh).
#
# Idempotent: `build` and `crds` skip what exists, `up` skips components whose pid is alive.
# A failed `up` stops what that call started. Every compile runs under `nice -n 19`.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
K8S_VERSION=${K8S_VERSION:-v1.37.2}                                   # k8s.io/kubernetes
K8S_STAGING_VERSION=v0.${K8S_VERSION#v1.}                              # k8s.io/api etc.
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
HELM_MODULE=${HELM_MODULE:-helm.sh/helm/v4}                            # fallback: helm.sh/helm/v3
HELM_VERSION=${HELM_VERSION:-v4.3.2}
HELM3_VERSION=${HELM3_VERSION:-v3.21.4}
KEDA_MODULE=github.com/kedacore/keda/v2@v2.20.2
JOBSET_MODULE=sigs.k8s.io/jobset@v0.12.0

CACHE=${M1FLOW_K8S_CACHE:-${M1FLOW_CACHE:-$HOME/.cache/m1flow}/k8s}
RUN=${K8S_RUN:-$CACHE/run}
# Ports off the usual ones (Kafka, a developer's own cluster); the tests pick free ones.
ETCD_PORT=${ETCD_PORT:-23790}
ETCD_PEER_PORT=${ETCD_PEER_PORT:-23800}
API_PORT=${API_PORT:-16443}
KCM_PORT=${KCM_PORT:-20257}
SCHED_PORT=${SCHED_PORT:-20259}
KWOK_PORT=${KWOK_PORT:-20247}
# Waits on the server are generous: the first start on a loaded 2-core machine is slow.
K8S_WAIT=${K8S_WAIT:-180}

BIN=$CACHE/bin/$K8S_VERSION
TOOLS=$CACHE/bin/tools        # kwok-<v>, helm-<v>
CRD_CACHE=$CACHE/crds
REPO_CRDS=$ROOT/deploy/k8s/crds
NODES=$ROOT/deploy/k8s/test-nodes.yaml
TIMINGS=$CACHE/timings.log
PKI=$RUN/pki
LOGS=$RUN/logs
KUBECONFIG=$RUN/admin.kubeconfig
export KUBECONFIG
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)

export GOMODCACHE=$CACHE/gomod GOCACHE=$CACHE/gocache GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=0
export GOFLAGS=-buildvcs=false

log() { printf '[k8s_local %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

timed() { # timed LABEL cmd...: run it and append "LABEL Ns" to $TIMINGS
  local label=$1 s; shift; s=$(date +%s)
  "$@"
  mkdir -p "$CACHE"; echo "$(date -u +%FT%TZ) $label $(($(date +%s) - s))s" >>"$TIMINGS"
  log "$label took $(($(date +%s) - s))s"
}

CANNOT=3   # exit code for "this machine cannot build the cluster" (no Go): make goes on, tests/k8s skips
need_go() {
  command -v go >/dev/null && return
  log "no Go toolchain (go) on PATH: the test cluster is built from Go modules; tests/k8s will skip"
  exit "$CANNOT"
}

# ---------------------------------------------------------------- build
install_etcd() {
  command -v etcd >/dev/null && command -v etcdctl >/dev/null && return
  command -v apt-get >/dev/null || die "etcd missing and no apt-get to install it"
  log "apt-get install etcd-server etcd-client"
  bash "$ROOT/scripts/apt_install.sh" etcd-server etcd-client >/dev/null
}

kwok_bin() { echo "$TOOLS/kwok-$KWOK_VERSION/kwok"; }
helm_bin() { # the v4 build, else the v3 fallback, else nothing
  local h
  for h in "$TOOLS/helm-$HELM_VERSION/helm" "$TOOLS/helm-$HELM3_VERSION/helm"; do
    [[ -x $h ]] && { echo "$h"; return; }
  done
  return 0
}

# The module zip has no staging/ tree and its go.mod replaces the 33 staging modules by
# ./staging paths: copy it and require the published modules at the matching v0.y.z instead.
prepare_src() {
  local src=$CACHE/src/kubernetes-$K8S_VERSION
  [[ -f $src/.prepared ]] && return
  log "downloading k8s.io/kubernetes@$K8S_VERSION from the Go module proxy"
  go mod download -json "k8s.io/kubernetes@$K8S_VERSION" >/dev/null
  rm -rf "$src"; mkdir -p "$CACHE/src"
  cp -r "$GOMODCACHE/k8s.io/kubernetes@$K8S_VERSION" "$src"
  chmod -R u+w "$src"
  rm -f "$src/go.work" "$src/go.work.sum"
  local m
  for m in $(sed -n '/^replace (/,/^)/p' "$src/go.mod" | awk '$2=="=>" && $3 ~ /^\.\/staging/ {print $1}'); do
    (cd "$src" && go mod edit -dropreplace="$m" -require="$m@$K8S_STAGING_VERSION")
  done
  touch "$src/.prepared"
}

# gitVersion matters: without it the server says v0.0.0-master and kubectl/kwok complain.
build_k8s() { # build_k8s NAME
  local name=$1 src=$CACHE/src/kubernetes-$K8S_VERSION
  local ld="-s -w -X 'k8s.io/component-base/version.gitVersion=$K8S_VERSION' -X 'k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION'"
  mkdir -p "$BIN"
  (cd "$src" && GOFLAGS="$GOFLAGS -mod=mod" nice -n 19 go build -trimpath -ldflags "$ld" -o "$BIN/$name.tmp" "./cmd/$name")
  mv "$BIN/$name.tmp" "$BIN/$name"
}

go_install() { # go_install DIR PACKAGE@VERSION [LDFLAGS...]
  local dir=$1 pkg=$2; shift 2
  mkdir -p "$dir"
  GOBIN=$dir nice -n 19 go install -trimpath -ldflags "-s -w $*" "$pkg"
}

# Helm v4 (helm.sh/helm/v4 v4.3.2 builds with `go install`: measured) is the current major; charts
# of apiVersion v2 work with both, so v3 is built only if v4 fails. The -X sets what `helm version`
# prints (v4.3 instead of v4.3.2 without it).
build_helm() {
  [[ -n $(helm_bin) ]] && return
  if timed "build-helm-$HELM_VERSION" go_install "$TOOLS/helm-$HELM_VERSION" "$HELM_MODULE/cmd/helm@$HELM_VERSION" \
       "-X $HELM_MODULE/internal/version.version=$HELM_VERSION"; then
    return
  fi
  log "helm $HELM_VERSION failed to build; falling back to helm.sh/helm/v3@$HELM3_VERSION"
  rm -rf "$TOOLS/helm-$HELM_VERSION"
  timed "build-helm-$HELM3_VERSION" go_install "$TOOLS/helm-$HELM3_VERSION" "helm.sh/helm/v3/cmd/helm@$HELM3_VERSION" \
    "-X helm.sh/helm/v3/internal/version.version=$HELM3_VERSION"
}

cmd_build() {
  need_go
  local s c; s=$(date +%s)
  build_helm   # first: the chart's render tests need only helm (tests/k8s/chart.py finds it cached)
  install_etcd
  [[ -f $CACHE/src/kubernetes-$K8S_VERSION/.prepared ]] || timed "prepare-src-$K8S_VERSION" prepare_src
  for c in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
    [[ -x $BIN/$c ]] || timed "build-$c-$K8S_VERSION" build_k8s "$c"
  done
  [[ -x $(kwok_bin) ]] || timed "build-kwok-$KWOK_VERSION" go_install "$TOOLS/kwok-$KWOK_VERSION" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  echo "$(date -u +%FT%TZ) build $(($(date +%s) - s))s" >>"$TIMINGS"
  log "build done in $(($(date +%s) - s))s: $BIN, $(kwok_bin), $(helm_bin)"
}

# ---------------------------------------------------------------- crds
module_dir() { go mod download -json "$1" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p'; }

copy_crds() { # copy_crds MODULE@VERSION PATH...: into $CRD_CACHE once
  local mod=$1 dir f out; shift
  dir=$(module_dir "$mod")
  [[ -d $dir ]] || die "go mod download $mod gave no directory"
  for f in "$@"; do
    out=$CRD_CACHE/$(basename "$f")
    [[ -f $out ]] && continue
    cp "$dir/$f" "$out.tmp" && chmod u+w "$out.tmp" && mv "$out.tmp" "$out"
    log "CRD from $mod: $(basename "$f")"
  done
}

cmd_crds() {
  need_go
  mkdir -p "$CRD_CACHE"
  copy_crds "$KEDA_MODULE" config/crd/bases/keda.sh_scaledobjects.yaml \
    config/crd/bases/keda.sh_triggerauthentications.yaml config/crd/bases/keda.sh_scaledjobs.yaml
  copy_crds "$JOBSET_MODULE" config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml
  compgen -G "$REPO_CRDS/*.yaml" >/dev/null || die "no CRD files in $REPO_CRDS"
}

# ---------------------------------------------------------------- up
pid_of() { cat "$RUN/$1.pid" 2>/dev/null; }
alive() { local p; p=$(pid_of "$1") && [[ -n $p ]] && kill -0 "$p" 2>/dev/null; }

STARTED=()   # components this call started: a failed `up` stops them again
start() { # start NAME cmd...
  local name=$1; shift
  if alive "$name"; then log "$name already running (pid $(pid_of "$name"))"; return; fi
  nohup "$@" >>"$LOGS/$name.log" 2>&1 </dev/null &
  echo $! >"$RUN/$name.pid"
  STARTED+=("$name")
  log "started $name (pid $!)"
}

dead_component() { # the first started component that exited, if any
  local n
  for n in "${COMPONENTS[@]}"; do
    [[ -f $RUN/$n.pid ]] && ! alive "$n" && { echo "$n"; return; }
  done
  return 0
}

wait_for() { # wait_for DESC SECONDS cmd...: poll once a second; fail at once if a component died
  local desc=$1 t=$2 start=$SECONDS dead; shift 2
  while true; do
    if "$@" >/dev/null 2>&1; then log "$desc after $((SECONDS - start))s"; return 0; fi
    dead=$(dead_component)
    if [[ -n $dead ]]; then log "$dead exited; its log ends:"; tail -20 "$LOGS/$dead.log" >&2; return 1; fi
    ((SECONDS - start < t)) || { log "$desc: not after ${t}s"; return 1; }
    sleep 1
  done
}

make_pki() {
  [[ -f $PKI/sa.pub ]] && return
  mkdir -p "$PKI"
  (cd "$PKI"
   ssl=openssl
   $ssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 -subj "/CN=m1flow-test-ca" 2>/dev/null
   $ssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj "/CN=kube-apiserver" 2>/dev/null
   printf 'subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\nextendedKeyUsage=serverAuth\n' >apiserver.ext
   $ssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out apiserver.crt -days 3650 -extfile apiserver.ext 2>/dev/null
   $ssl req -newkey rsa:2048 -nodes -keyout admin.key -out admin.csr -subj "/CN=admin/O=system:masters" 2>/dev/null
   printf 'extendedKeyUsage=clientAuth\n' >client.ext
   $ssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out admin.crt -days 3650 -extfile client.ext 2>/dev/null
   $ssl genrsa -out sa.key 2048 2>/dev/null
   $ssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null)
}

make_kubeconfig() {
  cat >"$KUBECONFIG" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: m1flow-test
  cluster: {server: "https://127.0.0.1:$API_PORT", certificate-authority: "$PKI/ca.crt"}
users:
- name: admin
  user: {client-certificate: "$PKI/admin.crt", client-key: "$PKI/admin.key"}
contexts:
- name: m1flow-test
  context: {cluster: m1flow-test, user: admin}
current-context: m1flow-test
EOF
}

# kwok refuses to start without Stage objects: take the "fast" ones its module ships.
make_kwok_config() {
  local d=$GOMODCACHE/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage f
  [[ -d $d ]] || go mod download "sigs.k8s.io/kwok@$KWOK_VERSION"
  for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
           pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    echo '---'; cat "$d/$f"
  done >"$RUN/kwok.yaml"
}

kubectl_() { "$BIN/kubectl" --request-timeout=30s "$@"; }

start_etcd() {
  start etcd etcd --name m1flow-test --data-dir "$RUN/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "m1flow-test=http://127.0.0.1:$ETCD_PEER_PORT" --listen-metrics-urls "" --log-level warn
  wait_for "etcd healthy" "$K8S_WAIT" etcdctl --endpoints "127.0.0.1:$ETCD_PORT" endpoint health
}

# --endpoint-reconciler-type none: 1.37 refuses a loopback advertise address with the default
# lease reconciler. InternalIP first: node names do not resolve.
start_apiserver() {
  start kube-apiserver "$BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" \
    --cert-dir "$PKI" --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --client-ca-file "$PKI/ca.crt" --authorization-mode RBAC --allow-privileged=true \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --service-cluster-ip-range 10.0.0.0/24 --storage-backend etcd3 \
    --kubelet-preferred-address-types InternalIP,Hostname \
    --endpoint-reconciler-type none
  wait_for "kube-apiserver /readyz" "$K8S_WAIT" kubectl_ get --raw /readyz
}

# --node-monitor-grace-period 300s: on a loaded machine kwok renews the node leases late; a
# NotReady flap would leave kwok's pods NotReady for good (its pod-ready stage matches once).
start_controllers() {
  local auth=(--kubeconfig "$KUBECONFIG" --authentication-kubeconfig "$KUBECONFIG" --authorization-kubeconfig "$KUBECONFIG"
              --bind-address 127.0.0.1 --leader-elect=false)
  start kube-controller-manager "$BIN/kube-controller-manager" "${auth[@]}" --secure-port "$KCM_PORT" \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
    --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
    --use-service-account-credentials=true --node-monitor-grace-period 300s
  start kube-scheduler "$BIN/kube-scheduler" "${auth[@]}" --secure-port "$SCHED_PORT"
  start kwok "$(kwok_bin)" --kubeconfig "$KUBECONFIG" --config "$RUN/kwok.yaml" \
    --manage-all-nodes=false --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
    --node-lease-duration-seconds 40 --cidr 10.244.0.0/16 --node-ip 10.244.0.1 \
    --server-address "127.0.0.1:$KWOK_PORT"
  # the default ServiceAccount is made by the controller-manager: proof that it works
  wait_for "default ServiceAccount" "$K8S_WAIT" kubectl_ -n default get serviceaccount default
}

nodes_ready() { kubectl_ wait --for=condition=Ready node --all --timeout=5s; }

# Server-side apply: the LWS CRD (1.3 MB) is too large for client-side apply's annotation.
install_crds() {
  local f
  for f in "$REPO_CRDS"/*.yaml "$CRD_CACHE"/*.yaml; do
    kubectl_ apply --server-side --force-conflicts -f "$f" >/dev/null
  done
  kubectl_ wait --for=condition=Established crd --all --timeout="${K8S_WAIT}s" >/dev/null
  log "CRDs Established: $(kubectl_ get crd -o name | wc -l)"
}

stop_started() { # the trap of a failed `up`: stop what this call started
  local rc=$? i
  ((rc == 0)) && return
  log "up failed (rc $rc): stopping what it started; logs in $LOGS"
  for ((i = ${#STARTED[@]} - 1; i >= 0; i--)); do stop_one "${STARTED[i]}"; done
  exit "$rc"
}

cmd_up() {
  [[ -x $BIN/kube-apiserver && -x $BIN/kube-controller-manager && -x $BIN/kube-scheduler && -x $BIN/kubectl && -x $(kwok_bin) ]] \
    || die "binaries missing in $CACHE/bin: run '$0 build' first"
  command -v etcd >/dev/null || die "etcd missing: run '$0 build' first"
  [[ -f $CRD_CACHE/keda.sh_scaledobjects.yaml && -f $CRD_CACHE/jobset.x-k8s.io_jobsets.yaml ]] || cmd_crds
  mkdir -p "$RUN" "$LOGS"
  local s; s=$(date +%s)
  trap stop_started EXIT
  trap 'exit 130' INT; trap 'exit 143' TERM   # a signal exits non-zero, so the EXIT trap cleans up
  make_pki; make_kubeconfig; make_kwok_config
  start_etcd
  start_apiserver
  start_controllers
  kubectl_ apply -f "$NODES" >/dev/null
  wait_for "test nodes Ready" "$K8S_WAIT" nodes_ready
  install_crds
  trap - EXIT INT TERM
  echo "$(date -u +%FT%TZ) up $(($(date +%s) - s))s" >>"$TIMINGS"
  log "cluster up in $(($(date +%s) - s))s; KUBECONFIG=$KUBECONFIG"
}

# ---------------------------------------------------------------- down, env, status
stop_one() { # stop_one NAME: TERM, wait up to 60 s (the apiserver shuts down slowly), then KILL
  local n=$1 pid i
  pid=$(pid_of "$n") || return 0
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for ((i = 0; i < 60; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -0 "$pid" 2>/dev/null && { log "$n did not exit on TERM: KILL"; kill -9 "$pid" 2>/dev/null || true; sleep 1; }
    log "stopped $n"
  fi
  rm -f "$RUN/$n.pid"
}

cmd_down() {
  local i
  for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do stop_one "${COMPONENTS[i]}"; done
  [[ -d $RUN ]] && rm -rf "$RUN/etcd" "$PKI" "$RUN/kwok.yaml" "$KUBECONFIG"
  log "down ($RUN; logs kept in $LOGS)"
}

cmd_env() {
  local path=$BIN:$TOOLS/kwok-$KWOK_VERSION h
  h=$(helm_bin); [[ -n $h ]] && path=$path:$(dirname "$h")
  echo "export KUBECONFIG=$KUBECONFIG"
  echo "export PATH=$path:\$PATH"
}

cmd_status() {
  local n
  for n in "${COMPONENTS[@]}"; do
    if alive "$n"; then echo "$n running (pid $(pid_of "$n"))"; else echo "$n stopped"; fi
  done
  echo "run dir $RUN; cache $CACHE"
  [[ -f $TIMINGS ]] && tail -12 "$TIMINGS"
  return 0
}

usage() { echo "usage: $0 {build|crds|up|down|env|status}..." >&2; exit 2; }

# One build at a time: `make test` runs `build crds` in the background while the other tiers run,
# and tests/k8s/conftest.py's own `build crds` waits here for it (then finds everything cached).
build_lock() {
  [[ -n ${BUILD_LOCKED:-} ]] && return
  mkdir -p "$CACHE"
  exec {BUILD_LOCK_FD}>"$CACHE/build.lock"
  if ! flock -n "$BUILD_LOCK_FD"; then
    log "another build holds $CACHE/build.lock: waiting for it"
    flock "$BUILD_LOCK_FD"
  fi
  BUILD_LOCKED=1
}

(($#)) || usage
for c in "$@"; do
  case $c in build|crds) build_lock ;; esac
done
for c in "$@"; do
  case $c in
    build) cmd_build ;; crds) cmd_crds ;; up) cmd_up ;; down) cmd_down ;;
    env) cmd_env ;; status) cmd_status ;; *) usage ;;
  esac
done
