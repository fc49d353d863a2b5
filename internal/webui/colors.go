package webui

import (
	"fmt"
	"hash/fnv"
	"math"
)

// noNodeColor is the colour of blocks that no node claims.
const noNodeColor = "#8c8c8c"

// nodeColor is a node's colour on the map: a hue, saturation and lightness
// taken from a hash of its name, so a node keeps its colour across
// reloads, servers and other nodes coming and going.
func nodeColor(node string) string {
	if node == "" {
		return noNodeColor
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(node))
	v := h.Sum32()
	// Mix all bits into all bits (murmur3's finalizer), so that similar
	// names (node-a, node-b) get unrelated colours.
	v ^= v >> 16
	v *= 0x85ebca6b
	v ^= v >> 13
	v *= 0xc2b2ae35
	v ^= v >> 16
	hue := float64(v%360) / 360
	sat := 0.55 + float64(v>>9%25)/100
	light := 0.38 + float64(v>>17%18)/100
	r, g, b := hslToRGB(hue, sat, light)
	return fmt.Sprintf("#%02x%02x%02x", r, g, b)
}

// hslToRGB converts hue, saturation and lightness in [0,1] to 8-bit RGB.
func hslToRGB(h, s, l float64) (r, g, b uint8) {
	c := (1 - math.Abs(2*l-1)) * s
	hp := h * 6
	x := c * (1 - math.Abs(math.Mod(hp, 2)-1))
	var r1, g1, b1 float64
	switch {
	case hp < 1:
		r1, g1 = c, x
	case hp < 2:
		r1, g1 = x, c
	case hp < 3:
		g1, b1 = c, x
	case hp < 4:
		g1, b1 = x, c
	case hp < 5:
		r1, b1 = x, c
	default:
		r1, b1 = c, x
	}
	m := l - c/2
	to8 := func(v float64) uint8 { return uint8(math.Round((v + m) * 255)) }
	return to8(r1), to8(g1), to8(b1)
}
