"""The weights cache: Hugging Face checkpoints downloaded by Hearth before their engine starts (fetching), their
progress for the console (progress), and the cache page that lists and frees them (cache, views).

May import: engines (the engine kind a launch is for), appliance (where a container engine reads the weights),
console.catalog (the model sources it downloads and imports), console.audit (recording what an admin freed),
console's shared modules (errors, names, templatetags). Nothing of the other console domains; the deployments above
it call for_launch before an engine starts.
"""
