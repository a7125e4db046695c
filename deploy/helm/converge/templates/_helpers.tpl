{{/* The release's name for converge objects, at most 63 characters. */}}
{{- define "converge.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "converge.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "converge.labels" -}}
{{ include "converge.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The roles deployed: control and broker, or all. */}}
{{- define "converge.roles" -}}
{{- if eq .Values.topology "all" -}}all{{- else -}}control broker{{- end -}}
{{- end -}}

{{/* The Secret holding the database URLs. */}}
{{- define "converge.databaseSecret" -}}
{{- if .Values.database.existingSecret -}}
{{- .Values.database.existingSecret -}}
{{- else -}}
{{- printf "%s-database" (include "converge.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* The key of DATABASE_READ_URL in that Secret, or nothing. */}}
{{- define "converge.readUrlKey" -}}
{{- if .Values.database.existingSecret -}}
{{- .Values.database.readUrlKey -}}
{{- else if .Values.database.readUrl -}}
DATABASE_READ_URL
{{- end -}}
{{- end -}}

{{/* The pod's grace period: given, or the drain's budget plus a margin. */}}
{{- define "converge.gracePeriod" -}}
{{- $s := .Values.shutdown -}}
{{- $needed := add $s.preStopSleepSecs $s.shutdownTimeoutSecs 5 -}}
{{- if gt (int $s.terminationGracePeriodSeconds) 0 -}}
{{- if lt (int $s.terminationGracePeriodSeconds) (int $needed) -}}
{{- fail (printf "shutdown.terminationGracePeriodSeconds (%d) must be at least preStopSleepSecs + shutdownTimeoutSecs + 5 = %d" (int $s.terminationGracePeriodSeconds) (int $needed)) -}}
{{- end -}}
{{- $s.terminationGracePeriodSeconds -}}
{{- else -}}
{{- add $needed $s.marginSecs -}}
{{- end -}}
{{- end -}}

{{/* Settings that contradict each other fail the render with one line. */}}
{{- define "converge.validate" -}}
{{- if and (not .Values.database.existingSecret) (not .Values.database.url) -}}
{{- fail "set database.existingSecret (a Secret with DATABASE_URL) or database.url" -}}
{{- end -}}
{{- if and .Values.tls.enabled (not .Values.tls.secretName) -}}
{{- fail "tls.enabled needs tls.secretName (a Secret with tls.crt and tls.key)" -}}
{{- end -}}
{{- if and .Values.tls.clientCA.enabled (not .Values.tls.enabled) -}}
{{- fail "tls.clientCA.enabled needs tls.enabled" -}}
{{- end -}}
{{- if and (or .Values.identities.api .Values.identities.workers) (not .Values.tls.clientCA.enabled) -}}
{{- fail "identities need tls.clientCA.enabled: converge reads identities from client certificates (behind a mesh, restrict callers with the mesh's policy)" -}}
{{- end -}}
{{- if and .Values.mesh.enabled .Values.tls.enabled -}}
{{- fail "mesh.enabled and tls.enabled exclude each other: the mesh sidecar does the mTLS, converge serves plaintext in the pod" -}}
{{- end -}}
{{- if and .Values.database.iamAuth .Values.database.passwordSecret.name -}}
{{- fail "database.iamAuth and database.passwordSecret exclude each other" -}}
{{- end -}}
{{- if and .Values.database.iamAuth (not .Values.database.awsRegion) -}}
{{- fail "database.iamAuth needs database.awsRegion (the region of the database)" -}}
{{- end -}}
{{- if and .Values.authz.policy .Values.authz.existingConfigMap -}}
{{- fail "authz.policy and authz.existingConfigMap exclude each other" -}}
{{- end -}}
{{- if and .Values.telemetry.serviceMonitor.enabled (not .Values.telemetry.metrics.enabled) -}}
{{- fail "telemetry.serviceMonitor.enabled needs telemetry.metrics.enabled" -}}
{{- end -}}
{{- end -}}

{{- define "converge.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "converge.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}
