package main

import (
	"context"
	"log"
)

func scaleBench(ctx context.Context, ep string, cli any, open any) {
	log.Print("scale: not implemented yet")
}
