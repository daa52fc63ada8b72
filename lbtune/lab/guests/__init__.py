"""Host side of the lab: the Guest interface and its two backends (UML, VM), and a lab kept up."""
