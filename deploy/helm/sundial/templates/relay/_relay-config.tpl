{{/* The relay's non-secret settings (SUNDIAL_* in its ConfigMap). */}}
{{- define "sundial.relay.config" -}}
{{- $v := .Values -}}
{{- $s := dict
  "kafka-brokers" $v.kafka.brokers
  "topic-prefix" $v.global.topicPrefix
  "topic-partitions" $v.relay.topicPartitions
  "topic-replication" $v.relay.topicReplication
-}}
{{- if not $v.postgres.dsnSecret.name -}}
{{- $_ := set $s "postgres-dsn" (include "sundial.postgresDSN" .) -}}
{{- end -}}
{{- $_ := include "sundial.connSettings" (dict "ctx" . "component" "relay" "settings" $s) -}}
{{- include "sundial.configData" (dict "ctx" . "component" "relay" "settings" $s) -}}
{{- end -}}
