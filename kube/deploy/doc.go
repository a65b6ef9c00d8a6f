// Package deploy holds what runs usher on Kubernetes: the endpoint picker's Deployment,
// Service, least-privilege RBAC and InferencePool (epp/), the plain-HTTP gateway's
// Deployment, Service, ServiceAccount and configuration (gateway/), each one's RBAC for
// reviewing scrapes of /metrics (metrics-auth.yaml), a kustomization over both, the optional
// ServiceMonitors with the scraper's RBAC (servicemonitor/), and a Dockerfile per binary
// (images/). README.md has the steps.
//
// The package has no Go API. Its tests are the manifests' CI: every document is decoded
// strictly with the real types (k8s.io/api for Kubernetes' kinds, package
// kube/inferencepool for the InferencePool), so an unknown, misspelt or repeated field
// fails as the API server's strict field validation would; then the references between the
// objects are checked — Service selectors against pod labels, the pool's endpointPickerRef
// against the picker's Service and port, the RoleBinding against the ServiceAccount the picker
// runs as, the Role's verbs, the metrics-auth ClusterRoleBindings against both
// ServiceAccounts, container arguments against the flags the binaries define, images
// against the Dockerfiles that build them.
package deploy
