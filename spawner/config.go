package spawner

func boolOr(b *bool, def bool) bool {
	if b == nil {
		return def
	}
	return *b
}
