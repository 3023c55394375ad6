"""Node identity: TLS bootstrap and certificate rotation (upstream ``pkg/kubelet/certificate``).

See :mod:`pykubelet.agent.certificate.manager`; :mod:`pykubelet.agent.certificate.keytool` makes
keys and CSRs in a child process so the agent never imports ``cryptography``.
"""
