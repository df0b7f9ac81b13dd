package main

import "errors"


func (e *env) figureD() error { return errors.New("todo") }

func runRefWS(args []string) int { return 2 }
