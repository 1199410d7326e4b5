"""The ACP adapter: Agent Client Protocol v1 on stdio, bridged to the HTTP front."""
