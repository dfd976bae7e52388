"""One workflow in three deployments: as first written, reordered, and reordered behind a patch."""
