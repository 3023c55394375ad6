"""The all-in-one pieces behind `pykubelet up`.

- images:     offline OCI images (busybox, pause) built from the local machine, imported with ctr
- registry:   a throwaway local docker-registry (+htpasswd) and skopeo push, for pull tests
- containerd: a private containerd (own sockets, CNI network, cgroup parent) and its host cleanup
- supervisor: runs server and agent as child processes, restarts them with back-off
- main:       the `pykubelet up` command
"""
