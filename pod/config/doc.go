// Package config reads devaipod's TOML configuration and validates it:
// every key is documented in docs/configuration.md, unknown keys are
// errors, and every error names the file, the line and the key.
package config
