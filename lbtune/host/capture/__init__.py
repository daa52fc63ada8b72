"""Host captures: writing one, its file tree while it is read, unpacking, the manifest.
"""
