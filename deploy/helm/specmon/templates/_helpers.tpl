{{/* The chart's name, for the app.kubernetes.io/name label. */}}
{{- define "specmon.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The objects' name: fullnameOverride, else the release name (followed by the chart's
name unless it holds it already), at most 63 characters. */}}
{{- define "specmon.fullname" -}}
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

{{- define "specmon.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* What the workload is: "exporter" (its own pods) or "sidecar" (in the engines' pods). */}}
{{- define "specmon.component" -}}
{{- if eq .Values.mode "sidecar" }}sidecar{{ else }}exporter{{ end }}
{{- end }}

{{/* Labels Helm adds, on every object. */}}
{{- define "specmon.helmLabels" -}}
helm.sh/chart: {{ include "specmon.chart" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Every object's labels; pass (dict "ctx" $ "component" "...") */}}
{{- define "specmon.labels" -}}
app.kubernetes.io/name: {{ include "specmon.name" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{ include "specmon.helmLabels" .ctx }}
{{- end }}

{{/* The workload's selector. */}}
{{- define "specmon.selectorLabels" -}}
app.kubernetes.io/name: {{ include "specmon.name" . }}
app.kubernetes.io/component: {{ include "specmon.component" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The `helm test` pod's labels that the NetworkPolicy admits (a subset of its labels). */}}
{{- define "specmon.testSelectorLabels" -}}
app.kubernetes.io/name: {{ include "specmon.name" . }}
app.kubernetes.io/component: test
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The release label kube-prometheus-stack's Prometheus selects on (values: releaseLabel). */}}
{{- define "specmon.releaseLabel" -}}
{{- with .Values.releaseLabel -}}
release: {{ . | quote }}
{{- end }}
{{- end }}

{{- define "specmon.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- $repository := .Values.image.repository }}
{{- if .Values.image.registry }}
{{- $repository = printf "%s/%s" .Values.image.registry .Values.image.repository }}
{{- end }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" $repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repository $tag }}
{{- end }}
{{- end }}

{{- define "specmon.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "specmon.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Sharded: a StatefulSet whose replicas split the targets (--shard I/N). */}}
{{- define "specmon.sharded" -}}
{{- if and (ne .Values.mode "sidecar") (gt (int .Values.replicas) 1) }}true{{ end }}
{{- end }}

{{/* The name of specmon's port. */}}
{{- define "specmon.portName" -}}
{{- if eq .Values.mode "sidecar" }}{{ .Values.sidecar.portName }}
{{- else if .Values.webConfig.enabled }}https
{{- else }}http
{{- end }}
{{- end }}

{{- define "specmon.scheme" -}}
{{- if .Values.webConfig.enabled }}https{{ else }}http{{ end }}
{{- end }}

{{- define "specmon.webSecretName" -}}
{{- default (printf "%s-web" (include "specmon.fullname" .)) .Values.webConfig.existingSecret }}
{{- end }}

{{/* The sidecar's volume is named apart from the engine's own. */}}
{{- define "specmon.volumeName" -}}
{{- if eq .Values.mode "sidecar" }}specmon-config{{ else }}config{{ end }}
{{- end }}

{{/* extraArgs may not set a flag the chart sets or owns (argparse takes the last one given,
and any unambiguous prefix of a flag's name: `--web.config=/dev/null` would turn TLS and
basic auth off under webConfig.enabled), nor open the lifecycle API (POST /-/reload,
/-/mark) without webConfig's password. Renders nothing; fails with the reason. */}}
{{- define "specmon.checkExtraArgs" -}}
{{- $own := dict
  "--config.file" "set it through `config` (or existingConfigSecret)"
  "--shard" "set `replicas` (the chart gives each replica its shard)"
  "--web.config.file" "set `webConfig`"
  "--log.format" "set `logFormat`"
  "--state.dir" "set `persistence` (the chart mounts the volume and passes --state.dir)"
  "--web.listen-address" "the chart's port, probes and Service use :10920" }}
{{- range .Values.extraArgs }}
{{- $arg := toString . }}
{{- $name := first (splitList "=" $arg) }}
{{- if and (hasPrefix "--" $name) (gt (len $name) 2) }}
{{- range $flag, $instead := $own }}
{{- if hasPrefix $name $flag }}
{{- fail (printf "extraArgs: %q would override the chart's own %s: %s" $arg $flag $instead) }}
{{- end }}
{{- end }}
{{- if and (hasPrefix $name "--web.enable-lifecycle") (not $.Values.webConfig.enabled) }}
{{- fail (printf "extraArgs: %q opens POST /-/reload and /-/mark to anyone who reaches the port: set webConfig.enabled (basic auth) first" $arg) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* Headers in `config` that look secret are refused as Authorization is (specmon's own
check sends that to the bearer_token and basic_auth keys): the ConfigMap is readable by whoever can
read ConfigMaps, and Helm keeps the values in its release record. Such a config goes in a
Secret of your own: existingConfigSecret. Renders nothing; fails naming the header. */}}
{{- define "specmon.checkHeaders" -}}
{{- if not .Values.existingConfigSecret }}
{{- $clients := list }}
{{- range $i, $t := (.Values.config.targets | default list) }}
{{- if kindIs "map" $t }}{{ $clients = append $clients (list (printf "config.targets[%d]" $i) $t) }}{{ end }}
{{- end }}
{{- range $i, $s := (.Values.config.sources | default list) }}
{{- if and (kindIs "map" $s) (kindIs "map" $s.prometheus) }}{{ $clients = append $clients (list (printf "config.sources[%d].prometheus" $i) $s.prometheus) }}{{ end }}
{{- end }}
{{- range $clients }}
{{- $where := index . 0 }}
{{- $headers := (index . 1).headers }}
{{- if kindIs "map" $headers }}
{{- range $header, $_ := $headers }}
{{- if regexMatch "(?i)(key|token|secret|passw|auth|cookie|credential|session)" $header }}
{{- fail (printf "%s.headers.%s looks like a secret: the chart would write it into a ConfigMap. Use bearer_token_file or basic_auth where the engine takes them, or put the whole config in a Secret of your own (existingConfigSecret)" $where $header) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* The specmon container: the workload's, and the one to copy into an engine pod
(sidecar mode, printed by NOTES.txt). */}}
{{- define "specmon.container" -}}
{{- include "specmon.checkExtraArgs" . }}
- name: specmon
  image: {{ include "specmon.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  {{- if include "specmon.sharded" . }}
  env:
    # The pod's ordinal, from the label Kubernetes 1.28 and later puts on StatefulSet pods.
    - name: SHARD_INDEX
      valueFrom:
        fieldRef:
          fieldPath: metadata.labels['apps.kubernetes.io/pod-index']
    {{- with .Values.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- else if .Values.extraEnv }}
  env:
    {{- toYaml .Values.extraEnv | nindent 4 }}
  {{- end }}
  args:
    - --config.file=/etc/specmon/specmon.yml
    {{- if include "specmon.sharded" . }}
    - --shard=$(SHARD_INDEX)/{{ int .Values.replicas }}
    {{- end }}
    {{- if .Values.webConfig.enabled }}
    - --web.config.file=/etc/specmon/web.yml
    {{- end }}
    - --log.format={{ .Values.logFormat }}
    {{- if and .Values.persistence.enabled (ne .Values.mode "sidecar") }}
    - --state.dir={{ .Values.persistence.mountPath }}
    {{- end }}
    {{- with .Values.extraArgs }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  ports:
    - name: {{ include "specmon.portName" . }}
      containerPort: 10920
      protocol: TCP
  livenessProbe:
    httpGet:
      scheme: {{ include "specmon.scheme" . | upper }}
      path: /healthz
      port: {{ include "specmon.portName" . }}
    {{- toYaml .Values.livenessProbe | nindent 4 }}
  {{- if ne .Values.mode "sidecar" }}
  readinessProbe:
    httpGet:
      scheme: {{ include "specmon.scheme" . | upper }}
      path: /readyz
      port: {{ include "specmon.portName" . }}
    {{- toYaml .Values.readinessProbe | nindent 4 }}
  {{- end }}
  {{- with .Values.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- $securityContext := deepCopy .Values.securityContext }}
  {{- if and (eq .Values.mode "sidecar") .Values.podSecurityContext.seccompProfile }}
  {{- /* The engine's pod sets no profile of ours: the container carries it. */}}
  {{- $_ := set $securityContext "seccompProfile" .Values.podSecurityContext.seccompProfile }}
  {{- end }}
  {{- with $securityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  volumeMounts:
    - name: {{ include "specmon.volumeName" . }}
      mountPath: /etc/specmon
      readOnly: true
    {{- if and .Values.persistence.enabled (ne .Values.mode "sidecar") }}
    - name: state
      mountPath: {{ .Values.persistence.mountPath }}
    {{- end }}
    {{- with .Values.extraVolumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}

{{/* The projected volume: specmon.yml, and with webConfig web.yml and tls/. */}}
{{- define "specmon.configVolume" -}}
- name: {{ include "specmon.volumeName" . }}
  projected:
    defaultMode: 0444
    sources:
      {{- if .Values.existingConfigSecret }}
      - secret:
          name: {{ .Values.existingConfigSecret }}
          items:
            - key: specmon.yml
              path: specmon.yml
      {{- else }}
      - configMap:
          name: {{ include "specmon.fullname" . }}
      {{- end }}
      {{- if .Values.webConfig.enabled }}
      - secret:
          name: {{ include "specmon.webSecretName" . }}
          items:
            - key: web.yml
              path: web.yml
      - secret:
          name: {{ .Values.webConfig.tlsSecret }}
          items:
            - key: tls.crt
              path: tls/tls.crt
            - key: tls.key
              path: tls/tls.key
      {{- end }}
{{- end }}

{{/* Everything that ends up in /etc/specmon, for the checksum/config annotation. */}}
{{- define "specmon.configChecksum" -}}
{{- $web := "" }}
{{- if and .Values.webConfig.enabled (not .Values.webConfig.existingSecret) }}
{{- $web = toYaml .Values.webConfig.config }}
{{- end }}
{{- $config := toYaml .Values.config }}
{{- with .Values.existingConfigSecret }}{{ $config = printf "secret %s" . }}{{ end }}
{{- printf "%s\n---\n%s" $config $web | sha256sum }}
{{- end }}

{{/* The tap container (sidecar mode with tap.enabled, printed by NOTES.txt): a reverse proxy
in front of the engine on the pod's loopback (docs/tap.md). */}}
{{- define "specmon.tapContainer" -}}
- name: specmon-tap
  image: {{ include "specmon.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command: [specmon, tap]
  args:
    - --upstream={{ .Values.tap.upstream }}
    - --listen=:{{ .Values.tap.port }}
    {{- if .Values.tap.classHeader }}
    - --class-header={{ .Values.tap.classHeader }}
    - --classes={{ join "," .Values.tap.classes }}
    {{- end }}
    - --log.format={{ .Values.logFormat }}
    {{- with .Values.tap.extraArgs }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  ports:
    - name: {{ .Values.tap.portName }}
      containerPort: {{ .Values.tap.port }}
      protocol: TCP
  # On the request path: the pod is Ready when the tap answers (clients reach the engine
  # through it).
  readinessProbe:
    httpGet:
      path: /healthz
      port: {{ .Values.tap.portName }}
    periodSeconds: 5
  livenessProbe:
    httpGet:
      path: /healthz
      port: {{ .Values.tap.portName }}
    {{- toYaml .Values.livenessProbe | nindent 4 }}
  {{- with .Values.tap.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- $securityContext := deepCopy .Values.securityContext }}
  {{- if .Values.podSecurityContext.seccompProfile }}
  {{- $_ := set $securityContext "seccompProfile" .Values.podSecurityContext.seccompProfile }}
  {{- end }}
  {{- with $securityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
