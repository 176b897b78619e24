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
-}}
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
