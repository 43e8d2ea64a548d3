package plan

// HostInfo is what the podman service says about the host.
type HostInfo struct {
	Version        string `json:"version"`
	APIVersion     string `json:"api_version"`
	Rootless       bool   `json:"rootless"`
	CgroupVersion  string `json:"cgroup_version"`
	CgroupManager  string `json:"cgroup_manager"`
	OCIRuntime     string `json:"oci_runtime"`
	GraphDriver    string `json:"graph_driver"`
	NetworkBackend string `json:"network_backend"`
	Kernel         string `json:"kernel"`
}

// LimitsEnforced tells whether podman applies resource limits on this
// host: rootless podman on cgroup v1 ignores them.
func (h HostInfo) LimitsEnforced() bool {
	return !(h.Rootless && h.CgroupVersion == "v1")
}
