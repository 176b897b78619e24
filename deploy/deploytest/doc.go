// Package deploytest checks the deployment tree: the Helm chart
// (deploy/helm/sundial), the Grafana dashboards (deploy/grafana) and the
// Prometheus rules (deploy/prometheus). Its unit tests run helm lint and helm
// template for every values file in the chart's ci/ folder and compare the
// renders with the committed golden copies in deploy/helm/tests, check
// invariants on the rendered objects (no secret in a ConfigMap, probes on
// every Deployment, a PodDisruptionBudget per service, the autoscaler each
// autoscaling mode asks for, only flags the services really have), parse
// every PromQL expression of the dashboards and rules, and run promtool's
// rule tests. Its integration test (tag integration) starts the four
// services against the real components, fires a job, and checks that every
// metric the dashboards and rules query is one the services export.
//
// The dashboards are generated from dashboards.go; `make deploy-generate`
// rewrites them, the chart's copies of the dashboards and rules, and the
// golden renders (go test -run 'TestGenerated|TestHelmGolden' -update).
package deploytest
