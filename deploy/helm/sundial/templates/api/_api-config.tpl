{{/* The api's non-secret settings (SUNDIAL_* in its ConfigMap). */}}
{{- define "sundial.api.config" -}}
{{- $v := .Values -}}
{{- $s := dict
  "grpc-addr" (printf "0.0.0.0:%v" $v.api.grpcPort)
  "redis-addr" $v.redis.addr
  "redis-key-prefix" $v.global.redisKeyPrefix
  "cassandra-hosts" $v.cassandra.hosts
  "cassandra-keyspace" $v.cassandra.keyspace
  "cassandra-replication" $v.cassandra.replication
  "migrate-on-start" (not $v.migrate.enabled)
  "grpc-stop-timeout" $v.api.grpcStopTimeout
  "idempotency-key-ttl" $v.api.idempotencyKeyTTL
  "tokens-file" "/etc/sundial/api-tokens/tokens.yaml"
-}}
{{- with $v.api.tls -}}
{{- if .enabled -}}
{{- $_ := set $s "tls-cert-file" "/etc/sundial/tls/api/tls.crt" -}}
{{- $_ := set $s "tls-key-file" "/etc/sundial/tls/api/tls.key" -}}
{{- $_ := set $s "tls-min-version" .minVersion -}}
{{- if .clientCA.existingSecret -}}
{{- $_ := set $s "tls-client-ca-file" "/etc/sundial/tls/api-client-ca/ca.crt" -}}
{{- if .clientCA.http -}}
{{- $_ := set $s "http-tls-client-ca-file" "/etc/sundial/tls/api-client-ca/ca.crt" -}}
{{- end -}}
{{- end -}}
{{- else -}}
{{- $_ := set $s "allow-plaintext" true -}}
{{- end -}}
{{- end -}}
{{- include "sundial.tenantFiles" (dict "ctx" . "settings" $s) -}}
{{- if $v.api.httpPort -}}
{{- $_ := set $s "http-addr" (printf "0.0.0.0:%v" $v.api.httpPort) -}}
{{- end -}}
{{- if $v.api.checkKafkaTopics -}}
{{- $_ := set $s "kafka-brokers" $v.kafka.brokers -}}
{{- end -}}
{{- if not $v.postgres.dsnSecret.name -}}
{{- $_ := set $s "postgres-dsn" (include "sundial.postgresDSN" .) -}}
{{- end -}}
{{- $_ := include "sundial.connSettings" (dict "ctx" . "component" "api" "settings" $s) -}}
{{- include "sundial.configData" (dict "ctx" . "component" "api" "settings" $s) -}}
{{- end -}}
