{-|
Plain-list reference models of the stream blocks. An image is a list of
rows, a row a list of pixels, a pixel a list of channel values (raw integers).
-}
module Reference
  ( Image
  , Pixel
  , windowsRef
  , padRef
  , maxRef
  , avgRef
  , collectRef
  , completingPixel
  , outputSize
  ) where

type Pixel = [Integer]
type Image = [[Pixel]]

-- | Number of valid window positions along an axis: @(n - k) `div` s + 1@.
outputSize :: Int -> Int -> Int -> Int
outputSize n k s = (n - k) `div` s + 1

-- | The windows of a valid convolution, raster order; window @[r][s]@ is
-- input pixel @(i*sh + r, j*sw + s)@.
windowsRef :: Int -> Int -> Int -> Int -> Image -> [[[Pixel]]]
windowsRef kh kw sh sw img =
  [ [ [ img !! (i * sh + r) !! (j * sw + s) | s <- [0 .. kw - 1] ] | r <- [0 .. kh - 1] ]
  | i <- [0 .. outputSize h kh sh - 1], j <- [0 .. outputSize w kw sw - 1] ]
  where
    h = length img
    w = length (head img)

-- | Raster index (within its image) of the pixel that completes window number
-- @k@ (raster order of windows).
completingPixel :: Int -> Int -> Int -> Int -> Int -> Int -> Int
completingPixel w kh kw sh sw k = (i * sh + kh - 1) * w + j * sw + kw - 1
  where
    (i, j) = k `divMod` outputSize w kw sw

-- | Constant padding.
padRef :: Int -> Int -> Int -> Int -> Integer -> Image -> Image
padRef top bottom left right value img =
  replicate top blank ++ map padRow img ++ replicate bottom blank
  where
    c = length (head (head img))
    w = length (head img)
    padPixel = replicate c value
    blank = replicate (left + w + right) padPixel
    padRow row = replicate left padPixel ++ row ++ replicate right padPixel

-- | Per channel maximum of a window.
maxRef :: [[Pixel]] -> Pixel
maxRef = map maximum . channels

-- | Per channel @floor ((2 * sum + n) / (2 * n))@.
avgRef :: [[Pixel]] -> Pixel
avgRef win = map average (channels win)
  where
    average vs = let n = fromIntegral (length vs) in (2 * sum vs + n) `div` (2 * n)

channels :: [[Pixel]] -> [[Integer]]
channels win = foldr1 (zipWith (++)) [ map (: []) p | p <- concat win ]

-- | Flatten an image, beat 0's channels first.
collectRef :: Image -> [Integer]
collectRef = concat . concat
