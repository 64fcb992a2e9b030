// Package cluster holds troupe's long end-to-end scenarios: elastic jobs
// of agent processes that join, leave, die and hang, their chaos in
// network namespaces (partitions, delays, loss, slow links), TLS and
// permanent failures. They take minutes, so they are a tier of their own:
// their files build only with the tag long (go test -tags long
// ./e2e/cluster; .ci/run runs them). The harness is in the test files;
// the common one (the troupe binary, deadlines, ports) in e2e/e2etest.
package cluster
