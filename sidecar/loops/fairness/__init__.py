"""Fair shares between the tenants of a tier: what each is entitled to, and how fair it was."""
