//go:build !linux

package webui

import "context"

// watchFile has no notification source here: polling suffices.
func watchFile(context.Context, string) <-chan struct{} { return nil }
