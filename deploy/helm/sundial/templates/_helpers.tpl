{{/*
Shared pieces of the per-service templates. Each service folder
(templates/<service>/) holds that service's Deployment, Service,
PodDisruptionBudget, ServiceMonitor and ConfigMap; they call the helpers
below with (dict "ctx" $ "component" "<service>").
*/}}

{{- define "sundial.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "sundial.componentName" -}}
{{- printf "%s-%s" (include "sundial.fullname" .ctx) .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sundial.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sundial
{{- end -}}

{{- define "sundial.componentLabels" -}}
{{ include "sundial.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "sundial.selectorLabels" -}}
app.kubernetes.io/name: {{ .ctx.Chart.Name }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "sundial.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "sundial.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "sundial.secretName" -}}
{{- default (printf "%s-secrets" (include "sundial.fullname" .)) .Values.secrets.existingSecret -}}
{{- end -}}

{{- define "sundial.image" -}}
{{- $repo := index .ctx.Values.image.repositories .component -}}
{{- $tag := default .ctx.Chart.AppVersion .ctx.Values.image.tag -}}
{{- if .ctx.Values.image.registry -}}
{{- printf "%s/%s:%s" .ctx.Values.image.registry $repo $tag -}}
{{- else -}}
{{- printf "%s:%s" $repo $tag -}}
{{- end -}}
{{- end -}}

{{/*
The Postgres DSN without its password: libpq and pgx take the password from
PGPASSWORD, which comes from the Secret, so the DSN can live in a ConfigMap.
With postgres.hosts, the multi-host form (postgres://user@h1:p1,h2:p2/db),
which pgx tries in order; with two or more hosts, target_session_attrs
defaults to read-write so connections find the primary.
*/}}
{{- define "sundial.postgresDSN" -}}
{{- $pg := .Values.postgres -}}
{{- $q := dict "sslmode" $pg.sslmode -}}
{{- $hosts := printf "%s:%v" $pg.host $pg.port -}}
{{- with $pg.hosts -}}
{{- $hosts = join "," . -}}
{{- if gt (len .) 1 -}}
{{- $_ := set $q "target_session_attrs" "read-write" -}}
{{- end -}}
{{- end -}}
{{- if .Values.tls.postgres.enabled -}}
{{- $_ := set $q "sslrootcert" "/etc/sundial/tls/postgres/ca.crt" -}}
{{- if .Values.tls.postgres.clientCert -}}
{{- $_ := set $q "sslcert" "/etc/sundial/tls/postgres/tls.crt" -}}
{{- $_ := set $q "sslkey" "/etc/sundial/tls/postgres/tls.key" -}}
{{- end -}}
{{- end -}}
{{- range $k, $v := $pg.params -}}
{{- $_ := set $q $k (toString $v) -}}
{{- end -}}
{{- $pairs := list -}}
{{- range $k := keys $q | sortAlpha -}}
{{- $pairs = append $pairs (printf "%s=%s" $k (urlquery (get $q $k) | replace "%2F" "/")) -}}
{{- end -}}
{{- printf "postgres://%s@%s/%s?%s" (urlquery $pg.user) $hosts $pg.database (join "&" $pairs) -}}
{{- end -}}

{{/* Fail on settings the services cannot honour. */}}
{{- define "sundial.validate" -}}
{{- with .Values.postgres.hosts -}}
{{- if not (kindIs "slice" .) -}}
{{- fail (printf "postgres.hosts: a list of host:port entries, one per server (hosts: [pg-0.pg:5432, pg-1.pg:5432]), not %q" (toString .)) -}}
{{- end -}}
{{- range $i, $h := . -}}
{{- $e := ternary "" (toString $h) (kindIs "invalid" $h) -}}
{{- if not (regexMatch "^(\\[[0-9A-Fa-f:.]+\\]|[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?):[0-9]{1,5}$" $e) -}}
{{- fail (printf "postgres.hosts[%d]: %q is not host:port; each entry names one server, such as pg-0.pg.db.svc:5432 or [fd00::1]:5432" $i $e) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- with .Values.postgres.params -}}
{{- if hasKey . "target_session_attrs" -}}
{{- $tsa := toString (get . "target_session_attrs") -}}
{{- if not (has $tsa (list "read-write" "primary" "any")) -}}
{{- fail (printf "postgres.params.target_session_attrs: %q; every service writes, so use read-write (the default with several postgres.hosts), primary or any" $tsa) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $c := list "redis" "zookeeper" "kafka" "cassandra" -}}
{{- $tls := index $.Values.tls $c -}}
{{- if and $tls.enabled $tls.clientCert (not $tls.existingSecret) -}}
{{- fail (printf "tls.%s.existingSecret: name the Secret holding tls.crt and tls.key (and ca.crt) for tls.%s.clientCert" $c $c) -}}
{{- end -}}
{{- end -}}
{{- range $c := list "redis" "zookeeper" "cassandra" -}}
{{- $a := (index $.Values $c).auth -}}
{{- if and $a.username (not $a.existingSecret) -}}
{{- fail (printf "%s.auth.existingSecret: name the Secret holding %s.auth.username's password" $c $c) -}}
{{- end -}}
{{- if and $a.existingSecret (not $a.username) (ne $c "redis") -}}
{{- fail (printf "%s.auth.username: required with %s.auth.existingSecret" $c $c) -}}
{{- end -}}
{{- end -}}
{{- if and (not .Values.zookeeper.auth.username) (not .Values.zookeeper.openACL) -}}
{{- fail "zookeeper.auth.username: name the prefetchers' ZooKeeper digest user (and zookeeper.auth.existingSecret, its password); every node they create admits only it. Or set zookeeper.openACL=true for world-writable nodes" -}}
{{- end -}}
{{- with .Values.kafka.sasl -}}
{{- if .mechanism -}}
{{- if not (has .mechanism (list "PLAIN" "SCRAM-SHA-256" "SCRAM-SHA-512")) -}}
{{- fail (printf "kafka.sasl.mechanism: %q is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512" .mechanism) -}}
{{- end -}}
{{- if not (and .username .existingSecret) -}}
{{- fail "kafka.sasl: a mechanism needs username and existingSecret (the Secret holding the password)" -}}
{{- end -}}
{{- else if or .username .existingSecret -}}
{{- fail "kafka.sasl.mechanism: set PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 with a SASL username and Secret" -}}
{{- end -}}
{{- end -}}
{{- if not (has .Values.autoscaling.signal (list "due" "lag")) -}}
{{- fail (printf "autoscaling.signal: %q is not one of due, lag" .Values.autoscaling.signal) -}}
{{- end -}}
{{- if and (eq .Values.autoscaling.mode "keda") (eq .Values.autoscaling.signal "due") (not .Values.autoscaling.keda.prometheus.serverAddress) -}}
{{- fail "autoscaling.keda.prometheus.serverAddress: KEDA reads the due backlog from Prometheus; name the server (or set autoscaling.signal=lag)" -}}
{{- end -}}
{{- if and (eq .Values.autoscaling.mode "keda") (eq .Values.autoscaling.signal "lag") (or .Values.kafka.sasl.mechanism .Values.tls.kafka.enabled) (not .Values.autoscaling.keda.authenticationRef) -}}
{{- fail "autoscaling.keda.authenticationRef: KEDA reads the workers' lag from the brokers itself, and these need SASL or TLS; name a TriggerAuthentication" -}}
{{- end -}}
{{- if and .Values.tls.postgres.enabled (not .Values.tls.postgres.existingSecret) -}}
{{- fail "tls.postgres.existingSecret: name the Secret holding ca.crt (and tls.crt/tls.key with clientCert)" -}}
{{- end -}}
{{- if and .Values.tls.postgres.enabled (eq .Values.postgres.sslmode "disable") -}}
{{- fail "tls.postgres.enabled with postgres.sslmode=disable: set sslmode to verify-full (or verify-ca, require)" -}}
{{- end -}}
{{- with .Values.api.tls -}}
{{- if and .enabled (not .existingSecret) -}}
{{- fail "api.tls.existingSecret: name the Secret holding the api's tls.crt and tls.key (a cert-manager Certificate's), or set api.tls.enabled=false to serve plaintext where a mesh encrypts pod traffic" -}}
{{- end -}}
{{- if not (has (toString .minVersion) (list "1.2" "1.3")) -}}
{{- fail (printf "api.tls.minVersion: %q is not one of 1.2, 1.3" (toString .minVersion)) -}}
{{- end -}}
{{- if and .clientCA.existingSecret (not .enabled) -}}
{{- fail "api.tls.clientCA: client certificates need api.tls.enabled" -}}
{{- end -}}
{{- if and .clientCA.http (not .clientCA.existingSecret) -}}
{{- fail "api.tls.clientCA.http: name the Secret of client CAs in api.tls.clientCA.existingSecret" -}}
{{- end -}}
{{- end -}}
{{- range $tenant, $secret := .Values.targetSecrets.tenants -}}
{{- if or (not $tenant) (hasPrefix "." $tenant) (contains "/" $tenant) (contains "\\" $tenant) -}}
{{- fail (printf "targetSecrets.tenants: %q is not a tenant name the workers look secrets up under (empty, a leading '.', or a path separator)" $tenant) -}}
{{- end -}}
{{- if not $secret -}}
{{- fail (printf "targetSecrets.tenants.%s: name the Secret holding the tenant's target secrets" $tenant) -}}
{{- end -}}
{{- end -}}
{{- if not (has .Values.tracing.exporter (list "none" "otlp-grpc" "otlp-http" "stdout")) -}}
{{- fail (printf "tracing.exporter: %q is not one of none, otlp-grpc, otlp-http, stdout" .Values.tracing.exporter) -}}
{{- end -}}
{{- if not (has .Values.autoscaling.mode (list "keda" "hpa" "none")) -}}
{{- fail (printf "autoscaling.mode: %q is not one of keda, hpa, none" .Values.autoscaling.mode) -}}
{{- end -}}
{{- if not .Values.signingKeys.kekSecret.existingSecret -}}
{{- fail "signingKeys.kekSecret.existingSecret: required, a Secret holding the key-encryption key of tenants' signing keys under signingKeys.kekSecret.key (kubectl create secret generic sundial-signing-kek --from-literal=kek=$(openssl rand -base64 48)): a tenant's first job makes its key, and the workers sign with nothing else" -}}
{{- end -}}
{{- if not .Values.secrets.existingSecret -}}
{{- if not .Values.secrets.create.apiTokens -}}
{{- fail "secrets: set secrets.existingSecret, or secrets.create.apiTokens (the api's tokens file: one `'<argon2id hash>': 'tenant[:name[:role]]'` line per token, as `schedctl token hash --principal` prints it): the api refuses to start without a token" -}}
{{- end -}}
{{- end -}}
{{- range $c := list "api" "prefetcher" "relay" "worker" -}}
{{- range $k, $v := (index $.Values $c).flags -}}
{{- if regexMatch "(?i)(secret|token|password|dsn)" $k -}}
{{- fail (printf "%s.flags.%s: secret settings go in the Secret (see secrets), never in a ConfigMap" $c $k) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* SUNDIAL_<FLAG> from a flag name. */}}
{{- define "sundial.envName" -}}
{{- printf "SUNDIAL_%s" (. | upper | replace "-" "_") -}}
{{- end -}}

{{/*
The ConfigMap data every service shares, then the service's own flags.
Called with (dict "ctx" $ "component" c "settings" (dict flag value)).
*/}}
{{- define "sundial.configData" -}}
{{- $ctx := .ctx -}}
{{- $svc := index $ctx.Values .component -}}
{{- $all := dict
  "admin-addr" (printf "0.0.0.0:%v" $svc.adminPort)
  "log-level" $ctx.Values.global.logLevel
  "log-format" $ctx.Values.global.logFormat
  "drain-timeout" (printf "%vs" $svc.drainTimeoutSeconds)
-}}
{{- with $ctx.Values.tracing -}}
{{- if ne .exporter "none" -}}
{{- $_ := set $all "otel-exporter" .exporter -}}
{{- $_ := set $all "otel-sample-ratio" .sampleRatio -}}
{{- $_ := set $all "otel-firing-sample-ratio" .firingSampleRatio -}}
{{- if .endpoint -}}
{{- $_ := set $all "otel-endpoint" .endpoint -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $k, $v := .settings -}}
{{- $_ := set $all $k $v -}}
{{- end -}}
{{- range $k, $v := $svc.flags -}}
{{- $_ := set $all $k $v -}}
{{- end -}}
{{- range $k := keys $all | sortAlpha }}
{{ include "sundial.envName" $k }}: {{ index $all $k | toString | quote }}
{{- end -}}
{{- end -}}

{{/* env entries that come from the Secret, for one service. */}}
{{- define "sundial.secretEnv" -}}
{{- $ctx := .ctx -}}
{{- $secret := include "sundial.secretName" $ctx -}}
{{- if has .component (list "api" "prefetcher" "relay" "worker" "migrate") }}
{{- if $ctx.Values.postgres.dsnSecret.name }}
- name: SUNDIAL_POSTGRES_DSN
  valueFrom:
    secretKeyRef:
      name: {{ $ctx.Values.postgres.dsnSecret.name }}
      key: {{ $ctx.Values.postgres.dsnSecret.key }}
{{- else }}
- name: PGPASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $ctx.Values.secrets.keys.postgresPassword }}
      optional: true
{{- end }}
{{- end }}
{{- if eq .component "worker" }}
- name: SUNDIAL_SIGNING_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $ctx.Values.secrets.keys.signingSecret }}
      optional: true
{{- end }}
{{- end -}}

{{- define "sundial.podMeta" -}}
{{- $svc := index .ctx.Values .component -}}
labels:
  {{- include "sundial.componentLabels" . | nindent 2 }}
  {{- with .ctx.Values.global.podLabels }}{{ toYaml . | nindent 2 }}{{ end }}
  {{- with $svc.podLabels }}{{ toYaml . | nindent 2 }}{{ end }}
annotations:
  checksum/config: {{ include (printf "sundial.%s.config" .component) .ctx | sha256sum }}
  {{- with .ctx.Values.global.podAnnotations }}{{ toYaml . | nindent 2 }}{{ end }}
  {{- with $svc.podAnnotations }}{{ toYaml . | nindent 2 }}{{ end }}
{{- end -}}

{{/*
The components each service (and the migration Job) talks to, besides
Postgres, which they all do.
*/}}
{{- define "sundial.components" -}}
{{- $uses := dict
  "api" (list "redis" "cassandra" "kafka")
  "migrate" (list "cassandra")
  "prefetcher" (list "zookeeper" "cassandra")
  "relay" (list "kafka")
  "worker" (list "redis" "kafka" "cassandra")
-}}
{{- join " " (index $uses .) -}}
{{- end -}}

{{/*
Sets, in .settings, the files the api and the workers share about
tenants: the signing keys' key-encryption key and the target-secret
directory (one mounted Secret per tenant under it). Paths only.
Called with (dict "ctx" $ "settings" dict).
*/}}
{{- define "sundial.tenantFiles" -}}
{{- if .ctx.Values.signingKeys.kekSecret.existingSecret -}}
{{- $_ := set .settings "signing-key-encryption-key-file" "/etc/sundial/signing-kek/kek" -}}
{{- end -}}
{{- if .ctx.Values.targetSecrets.tenants -}}
{{- $_ := set .settings "secrets-dir" "/etc/sundial/target-secrets" -}}
{{- end -}}
{{- end -}}

{{/*
Sets, in .settings, the TLS and credential flags (pkg/process/connsec, and each
client's Security: lease, kafkaconn, ledger, leader) of every
component .component uses: file paths and names only, never a secret.
Called with (dict "ctx" $ "component" c "settings" dict).
*/}}
{{- define "sundial.connSettings" -}}
{{- $ctx := .ctx -}}
{{- $s := .settings -}}
{{- $prefix := dict "redis" "redis" "zookeeper" "zk" "kafka" "kafka" "cassandra" "cassandra" -}}
{{- range $c := splitList " " (include "sundial.components" .component) -}}
{{- $p := index $prefix $c -}}
{{- $tls := index $ctx.Values.tls $c -}}
{{- if $tls.enabled -}}
{{- $_ := set $s (printf "%s-tls" $p) true -}}
{{- if $tls.existingSecret -}}
{{- $_ := set $s (printf "%s-tls-ca-file" $p) (printf "/etc/sundial/tls/%s/ca.crt" $c) -}}
{{- end -}}
{{- if $tls.clientCert -}}
{{- $_ := set $s (printf "%s-tls-cert-file" $p) (printf "/etc/sundial/tls/%s/tls.crt" $c) -}}
{{- $_ := set $s (printf "%s-tls-key-file" $p) (printf "/etc/sundial/tls/%s/tls.key" $c) -}}
{{- end -}}
{{- if $tls.serverName -}}
{{- $_ := set $s (printf "%s-tls-server-name" $p) $tls.serverName -}}
{{- end -}}
{{- end -}}
{{- $a := (index $ctx.Values $c).auth -}}
{{- $cred := $p -}}
{{- if eq $c "kafka" -}}
{{- $a = $ctx.Values.kafka.sasl -}}
{{- $cred = "kafka-sasl" -}}
{{- if $a.mechanism -}}
{{- $_ := set $s "kafka-sasl-mechanism" $a.mechanism -}}
{{- end -}}
{{- end -}}
{{- if $a.username -}}
{{- $_ := set $s (printf "%s-username" $cred) $a.username -}}
{{- end -}}
{{- if $a.existingSecret -}}
{{- $_ := set $s (printf "%s-password-file" $cred) (printf "/etc/sundial/credentials/%s/password" $c) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Volumes and mounts for the Secrets a service reads as files: TLS material
at /etc/sundial/tls/<component>/ and passwords at
/etc/sundial/credentials/<component>/password, only for the components it
uses; the api's own certificate and client CAs at /etc/sundial/tls/api and
/etc/sundial/tls/api-client-ca; and for the api and the workers, the
signing keys' key-encryption key at /etc/sundial/signing-kek/kek and one
Secret per tenant at /etc/sundial/target-secrets/<tenant>/.
Called with (dict "ctx" $ "component" c).
*/}}
{{- define "sundial.secretVolumes" -}}
{{- $ctx := .ctx -}}
{{- if eq .component "api" }}
- name: api-tokens
  secret:
    secretName: {{ include "sundial.secretName" $ctx }}
    defaultMode: 0440
    items:
      - key: {{ $ctx.Values.secrets.keys.apiTokens }}
        path: tokens.yaml
{{- end }}
{{- if $ctx.Values.tls.postgres.enabled }}
- name: tls-postgres
  secret:
    secretName: {{ $ctx.Values.tls.postgres.existingSecret }}
    defaultMode: 0440
{{- end }}
{{- if and (eq .component "api") $ctx.Values.api.tls.enabled }}
- name: tls-api
  secret:
    secretName: {{ $ctx.Values.api.tls.existingSecret }}
    defaultMode: 0440
    items:
      - key: tls.crt
        path: tls.crt
      - key: tls.key
        path: tls.key
{{- with $ctx.Values.api.tls.clientCA }}
{{- if .existingSecret }}
- name: tls-api-client-ca
  secret:
    secretName: {{ .existingSecret }}
    defaultMode: 0440
    items:
      - key: {{ .key }}
        path: ca.crt
{{- end }}
{{- end }}
{{- end }}
{{- if has .component (list "api" "worker") }}
{{- with $ctx.Values.signingKeys.kekSecret }}
{{- if .existingSecret }}
- name: signing-kek
  secret:
    secretName: {{ .existingSecret }}
    defaultMode: 0440
    items:
      - key: {{ .key }}
        path: kek
{{- end }}
{{- end }}
{{- range $i, $tenant := keys $ctx.Values.targetSecrets.tenants | sortAlpha }}
- name: target-secrets-{{ $i }}
  secret:
    secretName: {{ index $ctx.Values.targetSecrets.tenants $tenant }}
    defaultMode: 0440
{{- end }}
{{- end }}
{{- range $c := splitList " " (include "sundial.components" .component) }}
{{- $tls := index $ctx.Values.tls $c }}
{{- if and $tls.enabled $tls.existingSecret }}
- name: tls-{{ $c }}
  secret:
    secretName: {{ $tls.existingSecret }}
    defaultMode: 0440
{{- end }}
{{- $a := ternary $ctx.Values.kafka.sasl (index $ctx.Values $c).auth (eq $c "kafka") }}
{{- if $a.existingSecret }}
- name: credentials-{{ $c }}
  secret:
    secretName: {{ $a.existingSecret }}
    defaultMode: 0440
    items:
      - key: {{ $a.passwordKey }}
        path: password
{{- end }}
{{- end }}
{{- end -}}

{{- define "sundial.secretMounts" -}}
{{- $ctx := .ctx -}}
{{- if eq .component "api" }}
{{- /* A directory, not a subPath: the kubelet updates it when the Secret
changes, and the api reads the file again within seconds. */}}
- name: api-tokens
  mountPath: /etc/sundial/api-tokens
  readOnly: true
{{- end }}
{{- if $ctx.Values.tls.postgres.enabled }}
- name: tls-postgres
  mountPath: /etc/sundial/tls/postgres
  readOnly: true
{{- end }}
{{- if and (eq .component "api") $ctx.Values.api.tls.enabled }}
- name: tls-api
  mountPath: /etc/sundial/tls/api
  readOnly: true
{{- if $ctx.Values.api.tls.clientCA.existingSecret }}
- name: tls-api-client-ca
  mountPath: /etc/sundial/tls/api-client-ca
  readOnly: true
{{- end }}
{{- end }}
{{- if has .component (list "api" "worker") }}
{{- if $ctx.Values.signingKeys.kekSecret.existingSecret }}
- name: signing-kek
  mountPath: /etc/sundial/signing-kek
  readOnly: true
{{- end }}
{{- range $i, $tenant := keys $ctx.Values.targetSecrets.tenants | sortAlpha }}
- name: target-secrets-{{ $i }}
  mountPath: /etc/sundial/target-secrets/{{ $tenant }}
  readOnly: true
{{- end }}
{{- end }}
{{- range $c := splitList " " (include "sundial.components" .component) }}
{{- $tls := index $ctx.Values.tls $c }}
{{- if and $tls.enabled $tls.existingSecret }}
- name: tls-{{ $c }}
  mountPath: /etc/sundial/tls/{{ $c }}
  readOnly: true
{{- end }}
{{- $a := ternary $ctx.Values.kafka.sasl (index $ctx.Values $c).auth (eq $c "kafka") }}
{{- if $a.existingSecret }}
- name: credentials-{{ $c }}
  mountPath: /etc/sundial/credentials/{{ $c }}
  readOnly: true
{{- end }}
{{- end }}
{{- end -}}

{{/*
The Deployment of one service. Probes: /healthz (the process is alive) for
liveness and startup, /readyz (its dependencies answer, and it is not
draining) for readiness. The grace period covers the preStop sleep, the
service's own drain timeout and a margin.
*/}}
{{- define "sundial.deployment" -}}
{{- $ctx := .ctx -}}
{{- $c := .component -}}
{{- $svc := index $ctx.Values $c -}}
{{- $grace := add $svc.preStopSleepSeconds $svc.drainTimeoutSeconds $ctx.Values.global.terminationGraceMarginSeconds -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "sundial.componentName" . }}
  namespace: {{ $ctx.Release.Namespace }}
  labels:
    {{- include "sundial.componentLabels" . | nindent 4 }}
spec:
  {{- if not (and (eq $c "worker") (ne $ctx.Values.autoscaling.mode "none")) }}
  replicas: {{ $svc.replicas }}
  {{- end }}
  revisionHistoryLimit: 5
  selector:
    matchLabels:
      {{- include "sundial.selectorLabels" . | nindent 6 }}
  strategy:
    type: RollingUpdate
    rollingUpdate:
      maxSurge: 1
      maxUnavailable: 0
  template:
    metadata:
      {{- include "sundial.podMeta" . | nindent 6 }}
    spec:
      serviceAccountName: {{ include "sundial.serviceAccountName" $ctx }}
      automountServiceAccountToken: false
      {{- with $ctx.Values.image.pullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        {{- toYaml $ctx.Values.podSecurityContext | nindent 8 }}
      terminationGracePeriodSeconds: {{ $grace }}
      containers:
        - name: {{ $c }}
          image: {{ include "sundial.image" . }}
          imagePullPolicy: {{ $ctx.Values.image.pullPolicy }}
          securityContext:
            {{- toYaml $ctx.Values.securityContext | nindent 12 }}
          ports:
            - name: admin
              containerPort: {{ $svc.adminPort }}
              protocol: TCP
            {{- if eq $c "api" }}
            - name: grpc
              containerPort: {{ $svc.grpcPort }}
              protocol: TCP
            {{- if $svc.httpPort }}
            - name: http
              containerPort: {{ $svc.httpPort }}
              protocol: TCP
            {{- end }}
            {{- end }}
          envFrom:
            - configMapRef:
                name: {{ include "sundial.componentName" . }}
          env:
            {{- if has $c (list "prefetcher" "relay") }}
            - name: SUNDIAL_NODE_ID
              valueFrom:
                fieldRef:
                  fieldPath: metadata.name
            {{- end }}
            {{- if eq $c "worker" }}
            - name: SUNDIAL_WORKER_ID
              valueFrom:
                fieldRef:
                  fieldPath: metadata.name
            {{- end }}
            {{- with (include "sundial.secretEnv" . | trim) }}{{ . | nindent 12 }}{{ end }}
            {{- if ne $ctx.Values.tracing.exporter "none" }}
            # Spans name the pod they came from (OTEL_RESOURCE_ATTRIBUTES is
            # read by the OpenTelemetry SDK).
            - name: K8S_POD_NAME
              valueFrom:
                fieldRef:
                  fieldPath: metadata.name
            - name: K8S_NAMESPACE_NAME
              valueFrom:
                fieldRef:
                  fieldPath: metadata.namespace
            - name: OTEL_RESOURCE_ATTRIBUTES
              value: {{ printf "k8s.pod.name=$(K8S_POD_NAME),k8s.namespace.name=$(K8S_NAMESPACE_NAME),service.version=%s" (default $ctx.Chart.AppVersion $ctx.Values.image.tag) | quote }}
            {{- end }}
            {{- with $svc.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          startupProbe:
            httpGet:
              path: /healthz
              port: admin
            periodSeconds: 2
            failureThreshold: 60
          livenessProbe:
            httpGet:
              path: /healthz
              port: admin
            periodSeconds: 10
            timeoutSeconds: 3
            failureThreshold: 3
          readinessProbe:
            httpGet:
              path: /readyz
              port: admin
            periodSeconds: 5
            timeoutSeconds: 3
            failureThreshold: 2
          {{- if gt (int $svc.preStopSleepSeconds) 0 }}
          lifecycle:
            preStop:
              exec:
                command: ["sleep", "{{ $svc.preStopSleepSeconds }}"]
          {{- end }}
          resources:
            {{- toYaml $svc.resources | nindent 12 }}
          volumeMounts:
            - name: tmp
              mountPath: /tmp
            {{- with (include "sundial.secretMounts" . | trim) }}{{ . | nindent 12 }}{{ end }}
      volumes:
        - name: tmp
          emptyDir: {}
        {{- with (include "sundial.secretVolumes" . | trim) }}{{ . | nindent 8 }}{{ end }}
      {{- with (merge (dict) $svc.nodeSelector $ctx.Values.global.nodeSelector) }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with (concat $svc.tolerations $ctx.Values.global.tolerations) }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- if $svc.affinity }}
      affinity:
        {{- toYaml $svc.affinity | nindent 8 }}
      {{- else }}
      affinity:
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
            - weight: 100
              podAffinityTerm:
                topologyKey: kubernetes.io/hostname
                labelSelector:
                  matchLabels:
                    {{- include "sundial.selectorLabels" . | nindent 20 }}
      {{- end }}
      {{- with $svc.topologySpreadConstraints }}
      topologySpreadConstraints:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end -}}

{{- define "sundial.service" -}}
{{- $ctx := .ctx -}}
{{- $svc := index $ctx.Values .component -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "sundial.componentName" . }}
  namespace: {{ $ctx.Release.Namespace }}
  labels:
    {{- include "sundial.componentLabels" . | nindent 4 }}
  {{- with (and $svc.service $svc.service.annotations) }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  type: {{ (and $svc.service $svc.service.type) | default "ClusterIP" }}
  selector:
    {{- include "sundial.selectorLabels" . | nindent 4 }}
  ports:
    - name: admin
      port: {{ $svc.adminPort }}
      targetPort: admin
      protocol: TCP
    {{- if eq .component "api" }}
    - name: grpc
      port: {{ $svc.grpcPort }}
      targetPort: grpc
      protocol: TCP
      appProtocol: grpc
    {{- if $svc.httpPort }}
    - name: http
      port: {{ $svc.httpPort }}
      targetPort: http
      protocol: TCP
    {{- end }}
    {{- end }}
{{- end -}}

{{- define "sundial.pdb" -}}
{{- $ctx := .ctx -}}
{{- $svc := index $ctx.Values .component -}}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "sundial.componentName" . }}
  namespace: {{ $ctx.Release.Namespace }}
  labels:
    {{- include "sundial.componentLabels" . | nindent 4 }}
spec:
  {{- if hasKey $svc.pdb "minAvailable" }}
  minAvailable: {{ $svc.pdb.minAvailable }}
  {{- else }}
  maxUnavailable: {{ $svc.pdb.maxUnavailable | default 1 }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "sundial.selectorLabels" . | nindent 6 }}
{{- end -}}

{{- define "sundial.serviceMonitor" -}}
{{- $ctx := .ctx -}}
{{- if $ctx.Values.monitoring.serviceMonitor.enabled -}}
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: {{ include "sundial.componentName" . }}
  namespace: {{ $ctx.Release.Namespace }}
  labels:
    {{- include "sundial.componentLabels" . | nindent 4 }}
    {{- with $ctx.Values.monitoring.serviceMonitor.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  selector:
    matchLabels:
      {{- include "sundial.selectorLabels" . | nindent 6 }}
  endpoints:
    - port: admin
      path: /metrics
      interval: {{ $ctx.Values.monitoring.serviceMonitor.interval }}
{{- end -}}
{{- end -}}

{{- define "sundial.configMap" -}}
{{- $ctx := .ctx -}}
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ include "sundial.componentName" . }}
  namespace: {{ $ctx.Release.Namespace }}
  labels:
    {{- include "sundial.componentLabels" . | nindent 4 }}
data:
  {{- include (printf "sundial.%s.config" .component) $ctx | trim | nindent 2 }}
{{- end -}}
