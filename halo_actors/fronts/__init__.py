"""Fronts: the ways into the runtime from outside the process (HTTP, ACP).

A front authenticates, addresses a session and translates between a wire format
and the supervisor's methods. It never changes session state except through
those methods, and it reads streams and history only from the event log.
"""
