"""The Raft algorithm, sans-IO: one object per group, driven by tick/step/propose/ready/advance."""
