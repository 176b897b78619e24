{{/* The worker's non-secret settings (SUNDIAL_* in its ConfigMap). */}}
{{- define "sundial.worker.config" -}}
{{- $v := .Values -}}
{{- $s := dict
  "kafka-brokers" $v.kafka.brokers
  "topic-prefix" $v.global.topicPrefix
  "group" $v.worker.group
  "session-timeout" $v.worker.sessionTimeout
  "revoke-drain-timeout" $v.worker.revokeDrainTimeout
  "executors" $v.worker.executors
  "max-held" $v.worker.maxHeld
  "gc-percent" $v.worker.gcPercent
  "staging-window" $v.prefetcher.window
  "redis-addr" $v.redis.addr
  "redis-key-prefix" $v.global.redisKeyPrefix
  "cassandra-hosts" $v.cassandra.hosts
  "cassandra-keyspace" $v.cassandra.keyspace
-}}
{{- include "sundial.tenantFiles" (dict "ctx" . "settings" $s) -}}
{{- with $v.worker.metricsJobIds -}}
{{- $_ := set $s "metrics-job-ids" (join "," .) -}}
{{- end -}}
{{- if not $v.postgres.dsnSecret.name -}}
{{- $_ := set $s "postgres-dsn" (include "sundial.postgresDSN" .) -}}
{{- end -}}
{{- $_ := include "sundial.connSettings" (dict "ctx" . "component" "worker" "settings" $s) -}}
{{- include "sundial.configData" (dict "ctx" . "component" "worker" "settings" $s) -}}
{{- end -}}
