"""Third-party verification code wrapped so the auditor can run it on our models."""
