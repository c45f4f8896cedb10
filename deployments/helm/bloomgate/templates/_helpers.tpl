{{/* Name of every object: the release name, with "bloomgate" unless it is in it. */}}
{{- define "bloomgate.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Selector labels: stable across upgrades (selectors are immutable). */}}
{{- define "bloomgate.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "bloomgate.labels" -}}
{{ include "bloomgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "bloomgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "bloomgate.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The image: repository@digest, else repository:tag (tag defaults to appVersion). */}}
{{- define "bloomgate.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* Secret made by the chart from inline credentials. */}}
{{- define "bloomgate.secretName" -}}
{{- printf "%s-credentials" (include "bloomgate.fullname" .) -}}
{{- end -}}

{{- define "bloomgate.configPath" -}}/etc/bloomgate/bloomgate.yaml{{- end -}}
