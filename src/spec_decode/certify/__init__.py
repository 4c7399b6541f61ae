"""Certificates that exactness holds in running code: the closed-form identity, exhaustive
enumeration of the generator, seeded statistical tests, the auditor and its zoo of shipped bugs."""
