"""kubesim: a test Kubernetes cluster (apiserver + simulated kubelet) faithful at the wire."""
