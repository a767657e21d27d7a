{{/*
Names and labels.
*/}}
{{- define "framebus.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* `<release>-<chart>`, or fullnameOverride; 63 characters at most (DNS label). */}}
{{- define "framebus.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Name of a component's resources: `<fullname>-<suffix>`. The prefix is cut to 34 characters so
that the longest suffix (`decoder-` plus a 20-character shard name) still fits in 63.
Usage: include "framebus.componentName" (list . "decoder-a")
*/}}
{{- define "framebus.componentName" -}}
{{- $root := index . 0 -}}
{{- $prefix := include "framebus.fullname" $root | trunc 34 | trimSuffix "-" }}
{{- printf "%s-%s" $prefix (index . 1) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "framebus.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Selector labels of one component. Usage: include "framebus.selectorLabels" (list . "decoder") */}}
{{- define "framebus.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "framebus.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{/* All labels of one component's resources. Usage: include "framebus.labels" (list . "decoder") */}}
{{- define "framebus.labels" -}}
{{- $root := index . 0 -}}
helm.sh/chart: {{ include "framebus.chart" $root }}
{{ include "framebus.selectorLabels" . }}
app.kubernetes.io/version: {{ $root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
app.kubernetes.io/part-of: framebus
{{- with $root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "framebus.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "framebus.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* `repository:tag`, the tag defaulting to the chart's appVersion. Usage: include "framebus.image" (list . .Values.decoder.image) */}}
{{- define "framebus.image" -}}
{{- $root := index . 0 -}}
{{- $image := index . 1 }}
{{- printf "%s:%s" $image.repository (default $root.Chart.AppVersion $image.tag) }}
{{- end }}

{{/*
The decoder shards: `decoder.shards`, or one shard named "default" with `decoder.cameras`.
Returned as YAML (`shards: [...]`) because templates can only return strings.
*/}}
{{- define "framebus.decoderShards" -}}
{{- if .Values.decoder.shards }}
{{- toYaml (dict "shards" .Values.decoder.shards) }}
{{- else }}
{{- toYaml (dict "shards" (list (dict "name" "default" "cameras" .Values.decoder.cameras))) }}
{{- end }}
{{- end }}

{{/*
Kafka security: which parts are on.
*/}}
{{- define "framebus.kafka.usesSasl" -}}
{{- if hasPrefix "sasl_" .Values.kafka.securityProtocol }}true{{ end }}
{{- end }}

{{- define "framebus.kafka.usesTls" -}}
{{- if has .Values.kafka.securityProtocol (list "ssl" "sasl_ssl") }}true{{ end }}
{{- end }}

{{- define "framebus.kafka.tlsMountPath" -}}/etc/framebus/kafka-tls{{- end }}

{{/*
Environment shared by every framebus container: Kafka connection and topic names.
Credentials only ever come from the user's Secret through secretKeyRef.
*/}}
{{- define "framebus.kafkaEnv" -}}
{{- $kafka := .Values.kafka -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: FRAMEBUS_BOOTSTRAP_SERVERS
  value: {{ $kafka.bootstrapServers | quote }}
- name: FRAMEBUS_SECURITY_PROTOCOL
  value: {{ $kafka.securityProtocol | quote }}
- name: FRAMEBUS_CLIENT_ID
  value: "{{ $kafka.clientId }}-$(POD_NAME)"
- name: FRAMEBUS_FRAMES_TOPIC
  value: {{ $kafka.topics.frames | quote }}
- name: FRAMEBUS_DETECTIONS_TOPIC
  value: {{ $kafka.topics.detections | quote }}
- name: FRAMEBUS_DEADLETTER_TOPIC
  value: {{ $kafka.topics.deadletter | quote }}
- name: FRAMEBUS_TRACKS_TOPIC
  value: {{ $kafka.topics.tracks | quote }}
- name: FRAMEBUS_ALERTS_TOPIC
  value: {{ $kafka.topics.alerts | quote }}
- name: FRAMEBUS_TRACKER_CHANGELOG_TOPIC
  value: {{ $kafka.topics.trackerChangelog | quote }}
- name: FRAMEBUS_ALERTS_CHANGELOG_TOPIC
  value: {{ $kafka.topics.alertsChangelog | quote }}
- name: FRAMEBUS_VIDEO_TOPIC
  value: {{ $kafka.topics.video | quote }}
- name: FRAMEBUS_CLIPS_TOPIC
  value: {{ $kafka.topics.clips | quote }}
{{- if include "framebus.kafka.usesSasl" . }}
- name: FRAMEBUS_SASL_MECHANISM
  value: {{ $kafka.sasl.mechanism | quote }}
- name: FRAMEBUS_SASL_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ $kafka.sasl.existingSecret | quote }}
      key: {{ $kafka.sasl.usernameKey | quote }}
- name: FRAMEBUS_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $kafka.sasl.existingSecret | quote }}
      key: {{ $kafka.sasl.passwordKey | quote }}
{{- end }}
{{- if and (include "framebus.kafka.usesTls" .) $kafka.tls.existingSecret }}
- name: FRAMEBUS_SSL_CA_LOCATION
  value: "{{ include "framebus.kafka.tlsMountPath" . }}/{{ $kafka.tls.caKey }}"
{{- if $kafka.tls.certKey }}
- name: FRAMEBUS_SSL_CERTIFICATE_LOCATION
  value: "{{ include "framebus.kafka.tlsMountPath" . }}/{{ $kafka.tls.certKey }}"
- name: FRAMEBUS_SSL_KEY_LOCATION
  value: "{{ include "framebus.kafka.tlsMountPath" . }}/{{ $kafka.tls.keyKey }}"
{{- end }}
{{- end }}
{{- end }}

{{/* Environment of the long-running services: logging and the health/metrics HTTP port. */}}
{{- define "framebus.serviceEnv" -}}
- name: FRAMEBUS_LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
- name: FRAMEBUS_HTTP_PORT
  value: {{ .Values.http.port | quote }}
{{- end }}

{{/* Standard OpenTelemetry SDK variables. Usage: include "framebus.otelEnv" (list . "framebus-decoder") */}}
{{- define "framebus.otelEnv" -}}
{{- $otel := (index . 0).Values.otel -}}
- name: OTEL_SERVICE_NAME
  value: {{ index . 1 | quote }}
{{- if $otel.enabled }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ $otel.endpoint | quote }}
# The images ship the OTLP/HTTP exporter only.
- name: OTEL_EXPORTER_OTLP_PROTOCOL
  value: http/protobuf
- name: OTEL_TRACES_SAMPLER
  value: {{ $otel.sampler | quote }}
- name: OTEL_TRACES_SAMPLER_ARG
  value: {{ $otel.samplerArg | quote }}
{{- with $otel.resourceAttributes }}
- name: OTEL_RESOURCE_ATTRIBUTES
  value: {{ . | quote }}
{{- end }}
{{- else }}
- name: OTEL_SDK_DISABLED
  value: "true"
{{- end }}
{{- end }}

{{/* Volumes every framebus pod has: /tmp (the root filesystem is read-only) and the Kafka TLS Secret. */}}
{{- define "framebus.commonVolumes" -}}
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.tmpSizeLimit }}
{{- if and (include "framebus.kafka.usesTls" .) .Values.kafka.tls.existingSecret }}
- name: kafka-tls
  secret:
    secretName: {{ .Values.kafka.tls.existingSecret | quote }}
    defaultMode: 0440
{{- end }}
{{- end }}

{{- define "framebus.commonVolumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- if and (include "framebus.kafka.usesTls" .) .Values.kafka.tls.existingSecret }}
- name: kafka-tls
  mountPath: {{ include "framebus.kafka.tlsMountPath" . }}
  readOnly: true
{{- end }}
{{- end }}

{{/* Pod-level settings every framebus pod shares. */}}
{{- define "framebus.podCommon" -}}
automountServiceAccountToken: false
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end }}

{{/* Prometheus scrape annotations for a pod template. */}}
{{- define "framebus.scrapeAnnotations" -}}
{{- if .Values.metrics.podAnnotations -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .Values.http.port | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- end }}

{{/*
HTTP port and probes of a framebus container: liveness on /healthz, readiness on /readyz, and an
optional startup probe on /healthz. Usage: include "framebus.probes" .Values.decoder
*/}}
{{- define "framebus.probes" -}}
livenessProbe:
  httpGet:
    path: /healthz
    port: http
  {{- toYaml .livenessProbe | nindent 2 }}
readinessProbe:
  httpGet:
    path: /readyz
    port: http
  {{- toYaml .readinessProbe | nindent 2 }}
{{- with .startupProbe }}
startupProbe:
  httpGet:
    path: /healthz
    port: http
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* KEDA's name for a SASL mechanism. */}}
{{- define "framebus.keda.saslMode" -}}
{{- $modes := dict "PLAIN" "plaintext" "SCRAM-SHA-256" "scram_sha256" "SCRAM-SHA-512" "scram_sha512" }}
{{- get $modes .Values.kafka.sasl.mechanism }}
{{- end }}

{{/* Name of the TensorRT engine cache claim. */}}
{{- define "framebus.engineCacheClaim" -}}
{{- default (include "framebus.componentName" (list . "trt-cache")) .Values.inferencer.engineCache.pvc.existingClaim }}
{{- end }}

{{/*
Image of a CPU service run from the decoder image (tracker, alerts, live): its own image values, each
empty field taken from decoder.image. Returned as YAML.
Usage: include "framebus.cpuServiceImage" (list . .Values.tracker.image)
*/}}
{{- define "framebus.cpuServiceImage" -}}
{{- $t := index . 1 }}
{{- $d := (index . 0).Values.decoder.image }}
{{- toYaml (dict "repository" ($t.repository | default $d.repository) "tag" ($t.tag | default $d.tag) "pullPolicy" ($t.pullPolicy | default $d.pullPolicy)) }}
{{- end }}

{{/*
The replicas line of a Deployment that KEDA may scale: empty under KEDA (keda.enabled and the
component's keda.enabled), whose ScaledObject then owns the count, else `replicas: <replicas>`.
Usage: include "framebus.replicasUnlessKeda" (list . .Values.tracker)
*/}}
{{- define "framebus.replicasUnlessKeda" -}}
{{- $v := index . 1 }}
{{- if not (and (index . 0).Values.keda.enabled $v.keda.enabled) }}
{{- printf "replicas: %v" $v.replicas }}
{{- end }}
{{- end }}

{{/*
Deployment of a CPU service run from the decoder image (tracker, alerts, live): labels, pod annotations
(scrape on http.port), pod settings, image, command, port, environment, probes,
resources, volumes and scheduling, all from the component's values.
Parameters (a dict):
  root      the chart's root context
  component the component name (labels, resource name, container name, OTEL_SERVICE_NAME
            framebus-<component>)
  values    the component's values (image, podLabels, podAnnotations, priorityClassName,
            terminationGracePeriodSeconds, extraEnv, probes, resources, nodeSelector,
            tolerations, affinity)
  module    the Python module the container runs (`python -m <module>`)
  replicas  YAML put first in the Deployment's spec (the replicas line); empty for none
  env       the component's own env entries, put after the shared ones and before extraEnv
  annotations   optional: pod annotations of the component's own (e.g. a config checksum),
                under the component's podAnnotations
  volumes       optional: the component's own volumes (YAML list items), after the common ones
  volumeMounts  optional: their mounts in the container (YAML list items)
Usage: include "framebus.cpuServiceDeployment" (dict "root" . "component" "tracker" "values" .Values.tracker "module" "framebus_tracker" "replicas" "replicas: 1" "env" (include "framebus.tracker.env" .))
*/}}
{{- define "framebus.cpuServiceDeployment" -}}
{{- $root := .root }}
{{- $component := .component }}
{{- $v := .values }}
{{- $image := include "framebus.cpuServiceImage" (list $root $v.image) | fromYaml -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "framebus.componentName" (list $root $component) }}
  labels:
    {{- include "framebus.labels" (list $root $component) | nindent 4 }}
spec:
  {{- with .replicas }}
  {{- . | nindent 2 }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "framebus.selectorLabels" (list $root $component) | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "framebus.selectorLabels" (list $root $component) | nindent 8 }}
        {{- with $v.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- $annotations := merge (include "framebus.scrapeAnnotations" $root | fromYaml) ($v.podAnnotations | default dict) (.annotations | default dict) }}
      {{- with $annotations }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      serviceAccountName: {{ include "framebus.serviceAccountName" $root }}
      {{- include "framebus.podCommon" $root | nindent 6 }}
      {{- with $v.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      terminationGracePeriodSeconds: {{ $v.terminationGracePeriodSeconds }}
      containers:
        - name: {{ $component }}
          image: {{ include "framebus.image" (list $root $image) | quote }}
          imagePullPolicy: {{ $image.pullPolicy }}
          command: ["python", "-m", {{ .module | quote }}]
          ports:
            - name: http
              containerPort: {{ $root.Values.http.port }}
              protocol: TCP
          env:
            {{- include "framebus.kafkaEnv" $root | nindent 12 }}
            {{- include "framebus.serviceEnv" $root | nindent 12 }}
            {{- include "framebus.otelEnv" (list $root (printf "framebus-%s" $component)) | nindent 12 }}
            {{- with .env }}
            {{- . | nindent 12 }}
            {{- end }}
            {{- with $v.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          {{- include "framebus.probes" $v | nindent 10 }}
          resources:
            {{- toYaml $v.resources | nindent 12 }}
          securityContext:
            {{- toYaml $root.Values.securityContext | nindent 12 }}
          volumeMounts:
            {{- include "framebus.commonVolumeMounts" $root | nindent 12 }}
            {{- with .volumeMounts }}
            {{- . | nindent 12 }}
            {{- end }}
      volumes:
        {{- include "framebus.commonVolumes" $root | nindent 8 }}
        {{- with .volumes }}
        {{- . | nindent 8 }}
        {{- end }}
      {{- with $v.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end }}
