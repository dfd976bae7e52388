{{/*
The prefix of every resource's name: the release name, with "-slotflow" unless it holds it
already. 40 characters at most, so "<fullname>-orchestrator" and the topics Job's name fit the
63 of a label value.
*/}}
{{- define "slotflow.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The TLS Secret's name. */}}
{{- define "slotflow.tlsSecret" -}}
{{- .Values.tls.secretName | default (printf "%s-tls" (include "slotflow.fullname" .)) -}}
{{- end -}}

{{/* The image tag every service runs unless it overrides it: the chart's appVersion by default. */}}
{{- define "slotflow.tag" -}}
{{- .Values.image.tag | default .Chart.AppVersion -}}
{{- end -}}

{{/*
Labels of a resource: (dict "root" $ "component" "ticker"). The selector is the name label alone,
as in the manifests before the chart (a Deployment's selector cannot change).
*/}}
{{- define "slotflow.selector" -}}
app.kubernetes.io/name: {{ include "slotflow.fullname" .root }}-{{ .component }}
{{- end -}}

{{- define "slotflow.labels" -}}
{{ include "slotflow.selector" . }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/part-of: slotflow
{{- if not .root.Values.plainManifests }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/version: {{ include "slotflow.tag" .root | quote }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
{{- end }}
{{- end -}}

{{/* Labels of a pod: those of its workload but the chart's version, so a chart upgrade alone rolls nothing. */}}
{{- define "slotflow.podLabels" -}}
{{ include "slotflow.selector" . }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/part-of: slotflow
{{- if not .root.Values.plainManifests }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end }}
{{- end -}}

{{/*
Helm-only annotations of a resource the topics hook needs before the release's own resources exist
(its Secret, the TLS Secret): created before the Job (weight), replaced on each upgrade.
*/}}
{{- define "slotflow.hookAnnotations" -}}
{{- if not .root.Values.plainManifests -}}
annotations:
  helm.sh/hook: pre-install,pre-upgrade
  helm.sh/hook-weight: {{ .weight | quote }}
  helm.sh/hook-delete-policy: before-hook-creation
{{- end }}
{{- end -}}

{{/*
The settings every process reads, Kafka's and the logs', as a YAML map: the ConfigMap's first part
and the topics Job's environment (a hook runs before the ConfigMap exists).
*/}}
{{- define "slotflow.sharedSettings" -}}
# -- Kafka (docs/deploy.md; TLS and SASL settings: docs/security.md, "Kafka") --
SLOTFLOW_KAFKA_BOOTSTRAP: {{ required "kafka.bootstrap: the brokers, host:port,host:port" .Values.kafka.bootstrap | quote }}
# The brokers' certificate is checked against the system's CAs unless SLOTFLOW_KAFKA_SSL_CAFILE
# names a CA file (mounted from the TLS Secret at /etc/slotflow/tls). With a SASL protocol each
# service logs in as its own principal (its Secret).
SLOTFLOW_KAFKA_SECURITY_PROTOCOL: {{ .Values.kafka.securityProtocol | quote }}
{{- if hasPrefix "SASL_" .Values.kafka.securityProtocol }}
SLOTFLOW_KAFKA_SASL_MECHANISM: {{ required "kafka.saslMechanism: a SASL protocol needs a mechanism" .Values.kafka.saslMechanism | quote }}
{{- end }}
{{- with .Values.kafka.caFile }}
SLOTFLOW_KAFKA_SSL_CAFILE: {{ . | quote }}
{{- end }}
# Prefix of every topic and consumer group: several deployments can share one cluster.
SLOTFLOW_KAFKA_TOPIC_NAMESPACE: {{ .Values.kafka.topicNamespace | quote }}
# -- logs: one JSON object per line, for the cluster's log shipper --
SLOTFLOW_LOG_FORMAT: {{ .Values.logs.format | quote }}
SLOTFLOW_LOG_LEVEL: {{ .Values.logs.level | quote }}
{{- with .Values.config }}
# -- more settings (values: config) --
{{- range $name, $value := . }}
{{ $name }}: {{ $value | toString | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* A service's image: `image`, with the service's own `image` fields over it. */}}
{{- define "slotflow.image" -}}
{{- $image := mergeOverwrite (deepCopy .root.Values.image) (.values.image | default dict) -}}
image: {{ printf "%s:%s" $image.repository ($image.tag | default (include "slotflow.tag" .root)) | quote }}
imagePullPolicy: {{ $image.pullPolicy }}
{{- end -}}

{{/* The pod's security context: the image's user (deploy/docker/Dockerfile: USER 10001:10001). */}}
{{- define "slotflow.podSecurityContext" -}}
# The image's user (deploy/docker/Dockerfile: USER 10001:10001); never root.
securityContext:
  runAsNonRoot: true
  runAsUser: 10001
  runAsGroup: 10001
  fsGroup: 10001
  seccompProfile:
    type: RuntimeDefault
# slotflow never calls the Kubernetes API: no token in the pod.
automountServiceAccountToken: false
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "slotflow.containerSecurityContext" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: ["ALL"]
{{- end -}}

{{/* The egress every slotflow pod needs: Kafka, PostgreSQL, DNS; then the extra rules. */}}
{{- define "slotflow.egress" -}}
{{- $policy := .root.Values.networkPolicy -}}
# Kafka: every broker the bootstrap names and the brokers advertise.
- to:
    {{- range $policy.kafka.cidrs }}
    - ipBlock:
        cidr: {{ . | quote }}
    {{- end }}
  ports:
    {{- range $policy.kafka.ports }}
    - port: {{ . }}
      protocol: TCP
    {{- end }}
{{- if .postgres }}
# PostgreSQL.
- to:
    {{- range $policy.postgres.cidrs }}
    - ipBlock:
        cidr: {{ . | quote }}
    {{- end }}
  ports:
    {{- range $policy.postgres.ports }}
    - port: {{ . }}
      protocol: TCP
    {{- end }}
{{- end }}
# DNS, to the cluster's resolver wherever it runs.
- ports:
    {{- range $policy.dns.ports }}
    - port: {{ . }}
      protocol: UDP
    - port: {{ . }}
      protocol: TCP
    {{- end }}
{{- with $policy.extraEgress }}
{{ toYaml . }}
{{- end }}
{{- with .extra }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
A slotflow service: its Deployment, and with more than one replica its PodDisruptionBudget.
(dict "root" $ "component" "ticker" "command" (list ...) "portName" "metrics"
      "probes" (dict "startup" "/livez" "liveness" "/livez" "readiness" "/readyz")
      "probeComment" "..." "pdbComment" "..." "env" (dict ...) "stats" false)
*/}}
{{- define "slotflow.service" -}}
{{- $root := .root -}}
{{- $values := index $root.Values.services .component -}}
{{- $fullname := include "slotflow.fullname" $root -}}
{{- $labels := dict "root" $root "component" .component -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ $fullname }}-{{ .component }}
  labels:
    {{- include "slotflow.labels" $labels | nindent 4 }}
spec:
  replicas: {{ $values.replicas }}
  selector:
    matchLabels:
      {{- include "slotflow.selector" $labels | nindent 6 }}
  {{- if .stats }}
  # Never two workers with the same faust app at once while one is replaced.
  strategy:
    type: Recreate
  {{- end }}
  template:
    metadata:
      labels:
        {{- include "slotflow.podLabels" $labels | nindent 8 }}
      {{- $annotations := dict }}
      {{- if not .stats }}
      {{- $_ := set $annotations "prometheus.io/scrape" "true" }}
      {{- $_ := set $annotations "prometheus.io/port" (toString $values.port) }}
      {{- end }}
      {{- if not $root.Values.plainManifests }}
      {{- /* A changed setting or secret rolls the pods: Kubernetes restarts nothing on its own. */}}
      {{- $_ := set $annotations "checksum/config" (include (print $root.Template.BasePath "/config.yaml") $root | sha256sum) }}
      {{- if not $values.existingSecret }}
      {{- $_ := set $annotations "checksum/secret" ($values.secretEnv | toJson | sha256sum) }}
      {{- end }}
      {{- if $root.Values.tls.create }}
      {{- $_ := set $annotations "checksum/tls" ($root.Values.tls.files | toJson | sha256sum) }}
      {{- end }}
      {{- end }}
      {{- $annotations = mergeOverwrite $annotations ($values.podAnnotations | default dict) }}
      {{- with $annotations }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      {{- include "slotflow.podSecurityContext" $root | nindent 6 }}
      terminationGracePeriodSeconds: {{ $values.terminationGracePeriodSeconds }}
      {{- if and $root.Values.topologySpread.enabled (gt (int $values.replicas) 1) }}
      # Replicas apart: across zones, then across nodes, as well as the scheduler can (a cluster of
      # one zone still schedules). Only the current ReplicaSet's pods count during a rollout.
      topologySpreadConstraints:
        {{- range $key := list "topology.kubernetes.io/zone" "kubernetes.io/hostname" }}
        - maxSkew: {{ $root.Values.topologySpread.maxSkew }}
          topologyKey: {{ $key }}
          whenUnsatisfiable: ScheduleAnyway
          labelSelector:
            matchLabels:
              {{- include "slotflow.selector" $labels | nindent 14 }}
          matchLabelKeys: ["pod-template-hash"]
        {{- end }}
      {{- end }}
      {{- with $values.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $values.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $values.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
        - name: {{ .component }}
          {{- include "slotflow.image" (dict "root" $root "values" $values) | nindent 10 }}
          command: {{ toJson .command }}
          {{- if .stats }}
          # faust keeps its local state under the working directory: the writable volume.
          workingDir: /var/lib/slotflow
          {{- end }}
          ports:
            - name: {{ .portName }}
              containerPort: {{ $values.port }}
          envFrom:
            - configMapRef:
                name: {{ $fullname }}-config
            - secretRef:
                name: {{ $values.existingSecret | default (printf "%s-%s" $fullname .component) }}
          {{- $env := mergeOverwrite (deepCopy (.env | default dict)) ($values.env | default dict) }}
          {{- with $env }}
          env:
            {{- with $.envComment }}
            {{- . | nindent 12 }}
            {{- end }}
            {{- range $name, $value := . }}
            - name: {{ $name }}
              value: {{ $value | toString | quote }}
            {{- end }}
          {{- end }}
          {{- with .probeComment }}
          {{- . | nindent 10 }}
          {{- end }}
          startupProbe:
            httpGet:
              path: {{ .probes.startup }}
              port: {{ .portName }}
            periodSeconds: 5
            timeoutSeconds: 3
            failureThreshold: 66
          livenessProbe:
            httpGet:
              path: {{ .probes.liveness }}
              port: {{ .portName }}
            periodSeconds: 10
            timeoutSeconds: 3
            failureThreshold: 3
          readinessProbe:
            httpGet:
              path: {{ .probes.readiness }}
              port: {{ .portName }}
            periodSeconds: {{ .probes.readinessPeriod | default 5 }}
            timeoutSeconds: 3
            failureThreshold: {{ .probes.readinessFailures | default 2 }}
          resources:
            {{- toYaml $values.resources | nindent 12 }}
          {{- include "slotflow.containerSecurityContext" $root | nindent 10 }}
          volumeMounts:
            - name: tmp
              mountPath: /tmp
            - name: tls
              mountPath: /etc/slotflow/tls
              readOnly: true
            {{- if .stats }}
            - name: state
              mountPath: /var/lib/slotflow
            {{- end }}
      volumes:
        # The root filesystem is read-only; Python's tempfile (and anything a handler writes) gets
        # this scratch directory.
        - name: tmp
          emptyDir:
            sizeLimit: 256Mi
        - name: tls
          secret:
            secretName: {{ include "slotflow.tlsSecret" $root }}
            optional: true
        {{- if .stats }}
        - name: state
          emptyDir:
            sizeLimit: 1Gi
        {{- end }}
{{- if gt (int $values.replicas) 1 }}
---
{{- with .pdbComment }}
{{ . }}
{{- else }}
# A drain (node upgrade) takes this service's pods one at a time.
{{- end }}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ $fullname }}-{{ .component }}
  labels:
    {{- include "slotflow.labels" $labels | nindent 4 }}
spec:
  {{- toYaml $values.pdb | nindent 2 }}
  selector:
    matchLabels:
      {{- include "slotflow.selector" $labels | nindent 6 }}
{{- end }}
{{- end -}}

{{/* The probes' comment of a worker (ticker, claimer, orchestrator, dlq): its settings' prefix. */}}
{{- define "slotflow.workerProbeComment" -}}
# Starting waits for PostgreSQL (SLOTFLOW_PG_STARTUP_WAIT_SECONDS, 300 s) and migrates
# before the listener opens: up to 330 s before liveness takes over. /livez answers 503 once
# the event loop has missed its heartbeat for SLOTFLOW_{{ . }}_LIVENESS_STALL_SECONDS (30 s);
# /readyz while the loops run, the groups are joined and PostgreSQL and Kafka answer, and 503
# from the moment a stop begins (docs/operations.md, "Probes").
{{- end -}}
