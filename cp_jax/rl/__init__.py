"""Self-play PPO: the anchor trainer and its driver."""
