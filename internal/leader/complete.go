package leader

// Complete returns cfg with its defaults filled in, or an error naming
// every field that is wrong; it makes no API call. A component checks
// its configuration with it when it is created, long before Run.
func (cfg Config) Complete() (Config, error) { return cfg.complete() }
