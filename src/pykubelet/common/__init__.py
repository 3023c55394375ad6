"""What the agent and the control plane share: the API client, quantities, pod helpers."""
