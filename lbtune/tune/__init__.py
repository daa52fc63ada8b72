"""The knob engine: profiles resolve to plans; plans apply, verify and roll back."""
