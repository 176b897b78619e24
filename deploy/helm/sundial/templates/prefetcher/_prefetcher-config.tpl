{{/* The prefetcher's non-secret settings (SUNDIAL_* in its ConfigMap). */}}
{{- define "sundial.prefetcher.config" -}}
{{- $v := .Values -}}
{{- $s := dict
  "zk-addrs" $v.zookeeper.addrs
  "zk-session-timeout" $v.prefetcher.zkSessionTimeout
  "election-path" $v.prefetcher.electionPath
  "window" $v.prefetcher.window
  "catch-up-rate" $v.prefetcher.catchUpRate
  "ranges" $v.prefetcher.ranges
  "cassandra-hosts" $v.cassandra.hosts
  "cassandra-keyspace" $v.cassandra.keyspace
-}}
{{- if not $v.postgres.dsnSecret.name -}}
{{- $_ := set $s "postgres-dsn" (include "sundial.postgresDSN" .) -}}
{{- end -}}
{{- $_ := include "sundial.connSettings" (dict "ctx" . "component" "prefetcher" "settings" $s) -}}
{{- include "sundial.configData" (dict "ctx" . "component" "prefetcher" "settings" $s) -}}
{{- end -}}
