"""Using a trained model: its card and files (:mod:`fedgl.inference.card`), loading it as a
torch module (:mod:`fedgl.inference.load`) and scoring each organisation's own nodes
(:mod:`fedgl.inference.predict`). Nothing is imported until used."""
