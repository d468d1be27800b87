"""The serving stack: which file each distribution comes from, locks (read, drafted, resolved,
written, converted), the catalogue of release facts and the release-wheel check."""
