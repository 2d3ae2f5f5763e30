{{- /* Generated from deploy/rbac/*.yaml by hack/helm/sync_chart.py: edit that file, then run the script. */ -}}

{{- define "kdra.rules.kdra-driver-sim" -}}
- apiGroups: ['']
  resources: [nodes]
  verbs: [get, list, create, patch]
- apiGroups: ['']
  resources: [nodes/status]
  verbs: [patch]
- apiGroups: [resource.k8s.io]
  resources: [deviceclasses]
  verbs: [list, create]
- apiGroups: [resource.k8s.io]
  resources: [resourceslices]
  verbs: [get, list, create, update, delete]
{{- end -}}

{{- define "kdra.rules.kdra-reader" -}}
- apiGroups: ['']
  resources: [namespaces, nodes, pods]
  verbs: [get, list, watch]
- apiGroups: [resource.k8s.io]
  resources: [deviceclasses, resourceslices, resourceclaims, resourceclaimtemplates]
  verbs: [get, list, watch]
- apiGroups: [kdra.dev]
  resources: [queues]
  verbs: [get, list, watch]
{{- end -}}

{{- define "kdra.rules.kdra-scheduler" -}}
- apiGroups: ['']
  resources: [pods]
  verbs: [get, list, watch]
- apiGroups: ['']
  resources: [pods/binding]
  verbs: [create]
- apiGroups: ['']
  resources: [pods/status]
  verbs: [patch, update]
- apiGroups: ['']
  resources: [nodes]
  verbs: [list, watch]
- apiGroups: ['']
  resources: [events]
  verbs: [create]
- apiGroups: [resource.k8s.io]
  resources: [resourceclaims]
  verbs: [get, list, watch, create, update]
- apiGroups: [resource.k8s.io]
  resources: [resourceclaims/status]
  verbs: [update]
- apiGroups: [resource.k8s.io]
  resources: [resourceclaims/binding]
  verbs: [update]
- apiGroups: [resource.k8s.io]
  resources: [resourceclaimtemplates, resourceslices, deviceclasses]
  verbs: [list, watch]
{{- end -}}

{{- define "kdra.rules.kdra-scheduler-leader-election" -}}
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [create]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  resourceNames: [{{ .Values.scheduler.name | quote }}]
  verbs: [get, update]
{{- end -}}
