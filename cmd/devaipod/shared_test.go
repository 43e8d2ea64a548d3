package main

import (
	"testing"

	"github.com/devaipod/devaipod/pod/plan"
	"github.com/devaipod/devaipod/proxy"
)

// TestPlanAndProxyAgree holds equal what the plan cannot import from the
// proxy (it must not link goproxy): where the agent's init fetches the CA.
func TestPlanAndProxyAgree(t *testing.T) {
	if plan.ProxyCAPath != proxy.CAPath {
		t.Errorf("plan.ProxyCAPath %q, proxy.CAPath %q", plan.ProxyCAPath, proxy.CAPath)
	}
}
