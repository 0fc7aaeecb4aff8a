{{/* Names, labels and the facts about each service the templates share. */}}

{{- define "m1flow.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "m1flow.labels" -}}
app.kubernetes.io/name: m1flow
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one service: (dict "root" $ "name" "reward") */}}
{{- define "m1flow.selector" -}}
app.kubernetes.io/name: m1flow
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .name }}
{{- end -}}

{{/* The image reference, YAML-quoted (values.schema.json bounds repository and tag to a reference's grammar). */}}
{{- define "m1flow.image" -}}
{{ printf "%s:%s" .Values.image.repository .Values.image.tag | quote }}
{{- end -}}

{{/*
What the code fixes about each service (ops/services.py; the health names are what each
service's register() returns, m1flow/runtime/health.py sets them and "" SERVING together; the
consumer groups are Service.group_id's default, m1flow-<name>; the topics each consumes).
*/}}
{{- define "m1flow.facts" -}}
source: {health: "", group: m1flow-source, topic: "", kind: StatefulSet, pool: cpu}
rollout: {health: m1flow.v1.RolloutService, group: m1flow-rollout, topic: prompts, kind: StatefulSet, pool: gpu}
reward: {health: m1flow.v1.RewardService, group: m1flow-reward, topic: rollouts, kind: StatefulSet, pool: cpu}
sandbox: {health: m1flow.v1.SandboxService, group: "", topic: "", kind: Deployment, pool: cpu}
monitor: {health: m1flow.v1.MonitorService, group: m1flow-monitor, topic: "", kind: StatefulSet, pool: cpu}
eval: {health: "", group: m1flow-eval, topic: "", kind: StatefulSet, pool: gpu}
learner: {health: m1flow.v1.LearnerService, group: m1flow-learner, topic: scored, kind: Job, pool: gpu}
{{- end -}}

{{- define "m1flow.kafkaCluster" -}}
{{- .Values.kafka.strimzi.clusterName | default (printf "%s-kafka" (include "m1flow.fullname" .)) -}}
{{- end -}}

{{- define "m1flow.bootstrap" -}}
{{- if eq .Values.kafka.mode "external" -}}
{{- required "kafka.mode is external: set kafka.external.bootstrap to the cluster's host:port (e.g. kafka-bootstrap.kafka.svc:9092)" .Values.kafka.external.bootstrap -}}
{{- else -}}
{{- printf "%s-kafka-bootstrap:%d" (include "m1flow.kafkaCluster" .) (ternary 9093 9092 .Values.security.enabled) -}}
{{- end -}}
{{- end -}}

{{/* M1FLOW_TOPICS: the layout services create missing topics with, the same as the KafkaTopics. */}}
{{- define "m1flow.topicsJson" -}}
{{- dict "partitions" .Values.kafka.topics.partitions "replication_factor" .Values.kafka.topics.replicationFactor | toJson -}}
{{- end -}}

{{/* The sandbox's address for the reward service. */}}
{{- define "m1flow.sandboxAddress" -}}
{{ include "m1flow.fullname" . }}-sandbox:50051
{{- end -}}

{{/* env entries from a `settings` map: M1FLOW_<KEY>=value (maps and lists as JSON). */}}
{{- define "m1flow.settingsEnv" -}}
{{- range $key, $value := . }}
- name: {{ printf "M1FLOW_%s" ($key | upper) }}
  value: {{ if or (kindIs "map" $value) (kindIs "slice" $value) }}{{ $value | toJson | quote }}{{ else }}{{ $value | toString | quote }}{{ end }}
{{- end }}
{{- end -}}

{{/* The checkpoint store's env, for the pods that write or read checkpoints (learner, rollout). */}}
{{- define "m1flow.checkpointEnv" -}}
{{- if eq .Values.checkpoints.store "s3" }}
- name: M1FLOW_CHECKPOINT_URI
  value: {{ .Values.checkpoints.s3.uri | quote }}
{{- with .Values.checkpoints.s3.endpoint }}
- name: AWS_ENDPOINT_URL
  value: {{ . | quote }}
{{- end }}
{{- with .Values.checkpoints.s3.region }}
- name: AWS_REGION
  value: {{ . | quote }}
{{- end }}
{{- /* the services' `store:` block (m1flow/store_config.py): endpoint, region, and any further keys */ -}}
{{- $store := deepCopy (.Values.checkpoints.s3.store | default dict) -}}
{{- with .Values.checkpoints.s3.endpoint }}{{ $_ := set $store "endpoint_url" . }}{{ end -}}
{{- with .Values.checkpoints.s3.region }}{{ $_ := set $store "region" . }}{{ end -}}
{{- if $store }}
- name: M1FLOW_STORE
  value: {{ $store | toJson | quote }}
{{- end }}
{{- else }}
- name: M1FLOW_CHECKPOINT_URI
  value: {{ printf "file://%s" .Values.checkpoints.path | quote }}
{{- end }}
{{- end -}}

{{- define "m1flow.checkpointEnvFrom" -}}
{{- if eq .Values.checkpoints.store "s3" }}
- secretRef:
    name: {{ .Values.checkpoints.s3.credentialsSecret | quote }}
{{- end }}
{{- end -}}

{{/* Scheduling of a pool: (dict "root" $ "pool" "gpu") -> nodeSelector and tolerations */}}
{{- define "m1flow.placement" -}}
{{- $pool := get .root.Values.nodes .pool -}}
{{- with $pool.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $pool.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* topologySpreadConstraints with the service's own pods as the label selector. */}}
{{- define "m1flow.spread" -}}
{{- $selector := include "m1flow.selector" (dict "root" .root "name" .name) | fromYaml -}}
{{- with .constraints }}
topologySpreadConstraints:
{{- range . }}
  - {{ merge (dict "labelSelector" (dict "matchLabels" $selector)) . | toJson }}
{{- end }}
{{- end }}
{{- end -}}

{{/* gRPC health probes on the service's port, asking for its registered health name: the kubelet's
native `grpc:` probe, or with security.grpc an exec probe in the container (m1flow/runtime/probe.py)
that presents the pod's own certificate (the native probe speaks plaintext, which mTLS refuses). */}}
{{- define "m1flow.probes" -}}
{{- $check := dict "grpc" (dict "port" 50051) -}}
{{- if .health }}{{- $_ := set $check.grpc "service" .health -}}{{- end -}}
{{- if include "m1flow.grpcMtls" .root }}
{{- $check = dict "exec" (dict "command" (list "python" "-m" "m1flow.runtime.probe" "--address" "localhost:50051" "--service" (default "" .health))) -}}
{{- end }}
{{- $p := .root.Values.probes -}}
{{- range $probe, $key := dict "startupProbe" "startup" "readinessProbe" "readiness" "livenessProbe" "liveness" }}
{{ $probe }}:
  {{- toYaml $check | nindent 2 }}
  {{- toYaml (get $p $key) | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The run volume and /dev/shm: volumes (dict "root" $ "shm" .shm) */}}
{{- define "m1flow.volumes" -}}
- name: run
{{- if .root.Values.persistence.enabled }}
  persistentVolumeClaim:
    claimName: {{ .root.Values.persistence.existingClaim | default (printf "%s-run" (include "m1flow.fullname" .root)) | quote }}
{{- else }}
  emptyDir: {}
{{- end }}
{{- if and .shm .shm.enabled }}
- name: shm
  emptyDir:
    medium: Memory
    sizeLimit: {{ .shm.sizeLimit | quote }}
{{- end }}
{{- end -}}

{{- define "m1flow.volumeMounts" -}}
- {name: run, mountPath: /data/run}
{{- if and .shm .shm.enabled }}
- {name: shm, mountPath: /dev/shm}
{{- end }}
{{- end -}}

{{/* GPU resources: requests == limits for nvidia.com/gpu (the API server requires it). */}}
{{- define "m1flow.resources" -}}
{{- $res := deepCopy (.resources | default dict) -}}
{{- if .gpus -}}
{{- $req := get $res "requests" | default dict -}}
{{- $lim := get $res "limits" | default dict -}}
{{- $_ := set $req "nvidia.com/gpu" (int .gpus) -}}
{{- $_ := set $lim "nvidia.com/gpu" (int .gpus) -}}
{{- $_ := set $res "requests" $req -}}
{{- $_ := set $res "limits" $lim -}}
{{- end -}}
{{- toYaml $res -}}
{{- end -}}

{{/* One value as an item of a container's command or args list: never parsed by a shell (no
template puts a value into a `sh -c` string), YAML-quoted, and with each "$" doubled, the kubelet's
escape, so its $(VAR) expansion of command and args gives back the value itself. */}}
{{- define "m1flow.arg" -}}
{{- replace "$" "$$" (toString .) | quote -}}
{{- end -}}

{{/* The command every service runs, as compose gives it; each value one argument (m1flow.arg). */}}
{{- define "m1flow.serviceArgs" -}}
- --bootstrap
- {{ include "m1flow.arg" (include "m1flow.bootstrap" .root) }}
- --run-id
- {{ include "m1flow.arg" .root.Values.runId }}
- --run-dir
- /data/run
- --grpc-port
- "50051"
- --metrics-port
- "9100"
{{- end -}}

{{/* Whether the release runs service .name: "true" or "" (dict "root" $ "name" "eval"). The
on-demand ones run when given their settings (source.sources, eval.sets), the others when enabled. */}}
{{- define "m1flow.on" -}}
{{- $svc := get .root.Values .name -}}
{{- if eq .name "source" }}{{ if $svc.sources }}true{{ end }}
{{- else if eq .name "eval" }}{{ if $svc.sets }}true{{ end }}
{{- else if $svc.enabled }}true{{ end -}}
{{- end -}}

{{/* The Secret holding the monitor's access token: the user's, or the one this chart makes. */}}
{{- define "m1flow.monitorAccessSecret" -}}
{{- .Values.monitor.accessTokenSecret | default (printf "%s-monitor-access" (include "m1flow.fullname" .)) -}}
{{- end -}}

{{/* Kafka over mutual TLS (security.enabled): the principal's KafkaUser Secret (user.crt, user.key)
and the cluster CA, mounted as files; M1FLOW_SECURITY names them (paths only, never key material).
(dict "root" $ "name" "reward") */}}
{{- define "m1flow.kafkaUser" -}}
{{- printf "%s-%s" (include "m1flow.fullname" .root) .name -}}
{{- end -}}

{{/* Whether gRPC is mutual TLS (security.grpc.enabled under security.enabled). */}}
{{- define "m1flow.grpcMtls" -}}
{{- if and .Values.security.enabled .Values.security.grpc.enabled }}true{{ end -}}
{{- end -}}

{{/* The gRPC identities grpc-tls.yaml signs: every service this release runs, and `admin` (JSON list). */}}
{{- define "m1flow.grpcIdentities" -}}
{{- $names := list "admin" -}}
{{- range $name := list "source" "rollout" "reward" "sandbox" "monitor" "eval" "learner" }}
{{- if include "m1flow.on" (dict "root" $ "name" $name) }}{{ $names = append $names $name }}{{ end }}
{{- end }}
{{- $names | toJson -}}
{{- end -}}

{{/* (dict "root" $ "name" "reward") */}}
{{- define "m1flow.grpcSecret" -}}
{{- printf "%s-grpc-%s" (include "m1flow.fullname" .root) .name -}}
{{- end -}}

{{/* Whether the learner signs `policy` and its consumers verify it (security.policySigning under security.enabled). */}}
{{- define "m1flow.policySigning" -}}
{{- if and .Values.security.enabled .Values.security.policySigning.enabled }}true{{ end -}}
{{- end -}}

{{- define "m1flow.policySigningSecret" -}}
{{- printf "%s-policy-signing" (include "m1flow.fullname" .) -}}
{{- end -}}

{{/* Where an announced policy may lie: the checkpoint store the learner writes (never the rest of the run volume). */}}
{{- define "m1flow.checkpointRoot" -}}
{{- if eq .Values.checkpoints.store "s3" }}{{ .Values.checkpoints.s3.uri }}{{ else }}{{ .Values.checkpoints.path }}{{ end -}}
{{- end -}}

{{/* "true" when the service (dict "root" $ "name" "rollout") acts on `policy` records (each checks them
with Guard.admits), empty otherwise: such a service holds the signing certificate, never the key. */}}
{{- define "m1flow.readsPolicy" -}}
{{- if has .name (list "rollout" "source" "monitor" "eval") }}true{{ end -}}
{{- end -}}

{{/* M1FLOW_SECURITY of one service (dict "root" $ "name" "reward"): the Kafka identity's files and,
with security.grpc, the gRPC identity's (the sandbox, which touches no topic, has only that one, and
admits only `reward`). Paths only, never key material. */}}
{{- define "m1flow.securityEnv" -}}
{{- $v := .root.Values.security -}}
{{- $grpc := include "m1flow.grpcMtls" .root -}}
{{- if and $v.enabled (or $grpc (ne .name "sandbox")) }}
{{- $block := dict "enabled" true "grpc_tls" (not (empty $grpc)) -}}
{{- if ne .name "sandbox" }}
{{- $_ := set $block "ca_file" "/etc/m1flow/kafka-ca/ca.crt" -}}
{{- $_ := set $block "cert_file" "/etc/m1flow/kafka-user/user.crt" -}}
{{- $_ := set $block "key_file" "/etc/m1flow/kafka-user/user.key" -}}
{{- end }}
{{- if include "m1flow.policySigning" .root }}
{{- if eq .name "learner" }}
{{- $_ := set $block "policy_signing_key" "/etc/m1flow/policy-signing/tls.key" -}}
{{- else if include "m1flow.readsPolicy" . }}
{{- $_ := set $block "policy_verify_key" "/etc/m1flow/policy-signing/tls.crt" -}}
{{- $_ := set $block "checkpoint_roots" (list (include "m1flow.checkpointRoot" .root)) -}}
{{- end }}
{{- end }}
{{- if $grpc }}
{{- $_ := set $block "grpc_ca_file" "/etc/m1flow/grpc/ca.crt" -}}
{{- $_ := set $block "grpc_cert_file" "/etc/m1flow/grpc/tls.crt" -}}
{{- $_ := set $block "grpc_key_file" "/etc/m1flow/grpc/tls.key" -}}
{{- if eq .name "sandbox" }}
{{- $_ := set $block "ca_file" "/etc/m1flow/grpc/ca.crt" -}}
{{- $_ := set $block "cert_file" "/etc/m1flow/grpc/tls.crt" -}}
{{- $_ := set $block "key_file" "/etc/m1flow/grpc/tls.key" -}}
{{- $_ := set $block "grpc_allowed_peers" (list "reward") -}}
{{- end }}
{{- end }}
- name: M1FLOW_SECURITY
  value: {{ $block | toJson | quote }}
{{- end }}
{{- end -}}

{{- define "m1flow.securityMounts" -}}
{{- if and .root.Values.security.enabled (ne .name "sandbox") }}
- {name: kafka-user, mountPath: /etc/m1flow/kafka-user, readOnly: true}
- {name: kafka-ca, mountPath: /etc/m1flow/kafka-ca, readOnly: true}
{{- end }}
{{- if and (include "m1flow.policySigning" .root) (or (eq .name "learner") (include "m1flow.readsPolicy" .)) }}
- {name: policy-signing, mountPath: /etc/m1flow/policy-signing, readOnly: true}
{{- end }}
{{- if include "m1flow.grpcMtls" .root }}
- {name: grpc-identity, mountPath: /etc/m1flow/grpc, readOnly: true}
{{- end }}
{{- end -}}

{{- define "m1flow.securityVolumes" -}}
{{- if and .root.Values.security.enabled (ne .name "sandbox") }}
- name: kafka-user
  secret:
    secretName: {{ include "m1flow.kafkaUser" . }}
    defaultMode: 0400
- name: kafka-ca
  secret:
    secretName: {{ include "m1flow.kafkaCluster" .root }}-cluster-ca-cert
    items: [{key: ca.crt, path: ca.crt}]
{{- end }}
{{- if include "m1flow.policySigning" .root }}
{{- if eq .name "learner" }}
- name: policy-signing
  secret:
    secretName: {{ include "m1flow.policySigningSecret" .root }}
    defaultMode: 0400
{{- else if include "m1flow.readsPolicy" . }}
- name: policy-signing
  secret:
    secretName: {{ include "m1flow.policySigningSecret" .root }}
    items: [{key: tls.crt, path: tls.crt}]  # the certificate alone: no replica holds the key
{{- end }}
{{- end }}
{{- if include "m1flow.grpcMtls" .root }}
- name: grpc-identity
  secret:
    secretName: {{ include "m1flow.grpcSecret" . }}
    defaultMode: 0400
{{- end }}
{{- end -}}
