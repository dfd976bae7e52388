"""slotflow stats: windowed run statistics kept by a faust-streaming processor."""
